// nvml-probe prints what NVML shows the process it runs in, as one JSON object: the driver
// version and each GPU with its MIG devices. The real-node e2e runs it in GPU pods (image
// fakegpu.local/nvml-probe, built by hack/node.sh) to check that a container's NVML users see
// the GPUs the container was given, through the library the node agent mounts.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type migDevice struct {
	UUID        string `json:"uuid"`
	Name        string `json:"name"`
	MemoryTotal uint64 `json:"memoryTotal"`
}

type gpu struct {
	UUID        string      `json:"uuid"`
	Name        string      `json:"name"`
	MemoryTotal uint64      `json:"memoryTotal"`
	MigDevices  []migDevice `json:"migDevices"`
}

type report struct {
	Driver string `json:"driver"`
	GPUs   []gpu  `json:"gpus"`
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

func main() {
	check("Init", nvml.Init())
	driver, ret := nvml.SystemGetDriverVersion()
	check("SystemGetDriverVersion", ret)
	count, ret := nvml.DeviceGetCount()
	check("DeviceGetCount", ret)
	out := report{Driver: driver, GPUs: []gpu{}}
	for i := 0; i < count; i++ {
		device, ret := nvml.DeviceGetHandleByIndex(i)
		check("DeviceGetHandleByIndex", ret)
		g := gpu{MigDevices: []migDevice{}}
		g.UUID, g.Name, g.MemoryTotal = identify("GPU", device)
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
				g.MigDevices = append(g.MigDevices, m)
			}
		}
		out.GPUs = append(out.GPUs, g)
	}
	check("Shutdown", nvml.Shutdown())
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "nvml-probe:", err)
		os.Exit(1)
	}
}
