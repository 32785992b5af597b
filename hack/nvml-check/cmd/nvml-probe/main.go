// nvml-probe prints what NVML shows the process it runs in, as one JSON object: the driver
// version and each GPU with its MIG devices and the compute processes on them. The real-node
// e2e runs it in GPU pods (image fakegpu.local/nvml-probe, built by hack/node.sh) to check that
// a container's NVML users see the GPUs the container was given, and their own process on them,
// through the library the node agent mounts.
//
// NVML_PROBE_AWAIT_PROCESS=<seconds> makes it look again every half second, up to that long,
// until some GPU lists a process: the pod's use of its GPU reaches the node's document a moment
// after the pod is bound, and the container may start first.
//
// NVML_PROBE_RUN=<program> [args...] runs that command line (split at spaces) afterwards and
// adds what it printed as "ran": the container has no shell to run it with.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type process struct {
	Pid        uint32 `json:"pid"`
	Name       string `json:"name"`
	UsedMemory uint64 `json:"usedMemory"`
}

type migDevice struct {
	UUID        string    `json:"uuid"`
	Name        string    `json:"name"`
	MemoryTotal uint64    `json:"memoryTotal"`
	Processes   []process `json:"processes"`
}

type gpu struct {
	UUID        string      `json:"uuid"`
	Name        string      `json:"name"`
	MemoryTotal uint64      `json:"memoryTotal"`
	MigDevices  []migDevice `json:"migDevices"`
	Processes   []process   `json:"processes"`
}

type report struct {
	Driver string `json:"driver"`
	GPUs   []gpu  `json:"gpus"`
	Ran    string `json:"ran,omitempty"`
}

func check(what string, ret nvml.Return) {
	if ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "nvml-probe: %s: %v\n", what, nvml.ErrorString(ret))
		os.Exit(1)
	}
}

// identify reads what names a GPU or MIG device (what: which, for errors): its UUID, name and
// total memory in bytes.
func identify(what string, device nvml.Device) (string, string, uint64) {
	uuid, ret := device.GetUUID()
	check(what+" GetUUID", ret)
	name, ret := device.GetName()
	check(what+" GetName", ret)
	memory, ret := device.GetMemoryInfo()
	check(what+" GetMemoryInfo", ret)
	return uuid, name, memory.Total
}

// processes lists device's compute processes with the names NVML gives them.
func processes(what string, device nvml.Device) []process {
	infos, ret := device.GetComputeRunningProcesses()
	check(what+" GetComputeRunningProcesses", ret)
	out := []process{}
	for _, info := range infos {
		name, ret := nvml.SystemGetProcessName(int(info.Pid))
		check(what+" SystemGetProcessName", ret)
		out = append(out, process{Pid: info.Pid, Name: name, UsedMemory: info.UsedGpuMemory})
	}
	return out
}

// look reads what NVML shows now, and whether any GPU or MIG device lists a process.
func look(driver string) (report, bool) {
	count, ret := nvml.DeviceGetCount()
	check("DeviceGetCount", ret)
	out := report{Driver: driver, GPUs: []gpu{}}
	busy := false
	for i := 0; i < count; i++ {
		device, ret := nvml.DeviceGetHandleByIndex(i)
		check("DeviceGetHandleByIndex", ret)
		g := gpu{MigDevices: []migDevice{}}
		g.UUID, g.Name, g.MemoryTotal = identify("GPU", device)
		g.Processes = processes("GPU", device)
		busy = busy || len(g.Processes) > 0
		if current, _, ret := device.GetMigMode(); ret == nvml.SUCCESS && current == nvml.DEVICE_MIG_ENABLE {
			slots, ret := device.GetMaxMigDeviceCount()
			check("GetMaxMigDeviceCount", ret)
			for slot := 0; slot < slots; slot++ {
				mig, ret := device.GetMigDeviceHandleByIndex(slot)
				if ret == nvml.ERROR_NOT_FOUND {
					continue
				}
				check("GetMigDeviceHandleByIndex", ret)
				var m migDevice
				m.UUID, m.Name, m.MemoryTotal = identify("MIG", mig)
				m.Processes = processes("MIG", mig)
				g.MigDevices = append(g.MigDevices, m)
			}
		}
		out.GPUs = append(out.GPUs, g)
	}
	return out, busy
}

func main() {
	check("Init", nvml.Init())
	driver, ret := nvml.SystemGetDriverVersion()
	check("SystemGetDriverVersion", ret)
	wait, _ := strconv.Atoi(os.Getenv("NVML_PROBE_AWAIT_PROCESS"))
	deadline := time.Now().Add(time.Duration(wait) * time.Second)
	out, busy := look(driver)
	for !busy && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		out, busy = look(driver)
	}
	check("Shutdown", nvml.Shutdown())
	if command := strings.Fields(os.Getenv("NVML_PROBE_RUN")); len(command) > 0 {
		printed, err := exec.Command(command[0], command[1:]...).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "nvml-probe: %v: %v: %s\n", command, err, printed)
			os.Exit(1)
		}
		out.Ran = string(printed)
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "nvml-probe:", err)
		os.Exit(1)
	}
}
