// fakegpu's libnvidia-ml.so.1 as NVIDIA's own Go bindings see it: go-nvml (what the device
// plugin, GPU feature discovery and the DRA driver call NVML through) and go-nvlib (their
// helpers) enumerate the GPUs and MIG instances of a topology document, and every value must
// be the document's. hack/test.sh runs it with FAKEGPU_NVML_LIBRARY naming the built library.
package nvmlcheck

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"gopkg.in/yaml.v3"
)

// The fields of a topology document (model/src/topology.rs) the library answers from.
type document struct {
	GpuMemory         uint64 `yaml:"gpuMemory"`
	GpuProduct        string `yaml:"gpuProduct"`
	DriverVersion     string `yaml:"driverVersion"`
	CudaVersion       string `yaml:"cudaVersion"`
	Architecture      string `yaml:"architecture"`
	Brand             string `yaml:"brand"`
	ComputeCapability string `yaml:"computeCapability"`
	Gpus              []struct {
		ID         string `yaml:"id"`
		Index      int    `yaml:"index"`
		PciBusID   string `yaml:"pciBusId"`
		PcieRoot   string `yaml:"pcieRoot"`
		NumaNode   *int   `yaml:"numaNode"`
		MigDevices []struct {
			UUID           string `yaml:"uuid"`
			Profile        string `yaml:"profile"`
			PlacementStart int    `yaml:"placementStart"`
			MemorySlices   int    `yaml:"memorySlices"`
			Memory         uint64 `yaml:"memory"`
		} `yaml:"migDevices"`
	} `yaml:"gpus"`
}

const mib = 1024 * 1024

func library(t *testing.T) string {
	t.Helper()
	path := os.Getenv("FAKEGPU_NVML_LIBRARY")
	if path == "" {
		t.Fatal("FAKEGPU_NVML_LIBRARY must name the built library (hack/test.sh sets it)")
	}
	return path
}

// session loads the library against the document at path, with NVIDIA_VISIBLE_DEVICES set
// to visible (unset when empty), and shuts it down when the test ends.
func session(t *testing.T, path, visible string) nvml.Interface {
	t.Helper()
	t.Setenv("FAKEGPU_NVML_TOPOLOGY", path)
	if visible == "" {
		os.Unsetenv("NVIDIA_VISIBLE_DEVICES")
	} else {
		t.Setenv("NVIDIA_VISIBLE_DEVICES", visible)
	}
	lib := nvml.New(nvml.WithLibraryPath(library(t)))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	t.Cleanup(func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			t.Errorf("Shutdown: %v", ret)
		}
	})
	return lib
}

func read(t *testing.T, path string) document {
	t.Helper()
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc document
	if err := yaml.Unmarshal(text, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return doc
}

func check[T comparable](t *testing.T, what string, got T, ret nvml.Return, want T) {
	t.Helper()
	if ret != nvml.SUCCESS {
		t.Errorf("%s: %v", what, ret)
	} else if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

func cString(chars []int8) string {
	var b strings.Builder
	for _, c := range chars {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// h100 is the text of nvml/tests/documents/h100.yml, which the tests that rewrite a document
// (pods, faults) start from.
func h100(t *testing.T) string {
	t.Helper()
	text, err := os.ReadFile("../../nvml/tests/documents/h100.yml")
	if err != nil {
		t.Fatal(err)
	}
	return string(text)
}

func documents(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob("../../nvml/tests/documents/*.yml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no documents under nvml/tests/documents: %v", err)
	}
	return paths
}

func TestEveryValueIsTheDocuments(t *testing.T) {
	for _, path := range documents(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			doc := read(t, path)
			lib := session(t, path, "")
			version, ret := lib.SystemGetDriverVersion()
			check(t, "driver version", version, ret, doc.DriverVersion)
			cuda, ret := lib.SystemGetCudaDriverVersion()
			var major, minor int
			fmt.Sscanf(doc.CudaVersion, "%d.%d", &major, &minor)
			check(t, "CUDA driver version", cuda, ret, major*1000+minor*10)
			count, ret := lib.DeviceGetCount()
			check(t, "device count", count, ret, len(doc.Gpus))
			for i, gpu := range doc.Gpus {
				dev, ret := lib.DeviceGetHandleByIndex(i)
				if ret != nvml.SUCCESS {
					t.Fatalf("handle %d: %v", i, ret)
				}
				name, ret := dev.GetName()
				check(t, "name", name, ret, doc.GpuProduct)
				uuid, ret := dev.GetUUID()
				check(t, "UUID", uuid, ret, gpu.ID)
				minorNumber, ret := dev.GetMinorNumber()
				check(t, "minor", minorNumber, ret, gpu.Index)
				memory, ret := dev.GetMemoryInfo()
				check(t, "memory total", memory.Total, ret, doc.GpuMemory*mib)
				pci, ret := dev.GetPciInfo()
				check(t, "PCI bus ID", cString(pci.BusId[:]), ret, "0000"+strings.ToUpper(gpu.PciBusID))
				check(t, "legacy PCI bus ID", cString(pci.BusIdLegacy[:]), ret, strings.ToUpper(gpu.PciBusID))
				ccMajor, ccMinor, ret := dev.GetCudaComputeCapability()
				check(t, "compute capability", fmt.Sprintf("%d.%d", ccMajor, ccMinor), ret, doc.ComputeCapability)
				byUUID, ret := lib.DeviceGetHandleByUUID(gpu.ID)
				check(t, "handle by UUID", byUUID, ret, dev)

				// go-nvlib, as GFD and the DRA driver name what they find.
				wrapped, err := device.New(lib).NewDevice(dev)
				if err != nil {
					t.Fatal(err)
				}
				arch, err := wrapped.GetArchitectureAsString()
				check(t, "architecture", arch, errReturn(err), doc.Architecture)
				brand, err := wrapped.GetBrandAsString()
				check(t, "brand", brand, errReturn(err), doc.Brand)
				migEnabled, err := wrapped.IsMigEnabled()
				check(t, "MIG enabled", migEnabled, errReturn(err), len(gpu.MigDevices) > 0)
				migs, err := wrapped.GetMigDevices()
				if err != nil || len(migs) != len(gpu.MigDevices) {
					t.Fatalf("GPU %d: %d MIG devices (%v), want %d", i, len(migs), err, len(gpu.MigDevices))
				}
				for j, want := range gpu.MigDevices {
					mig := migs[j]
					uuid, ret := mig.GetUUID()
					check(t, "MIG UUID", uuid, ret, want.UUID)
					name, ret := mig.GetName()
					check(t, "MIG name", name, ret, doc.GpuProduct+" MIG "+want.Profile)
					memory, ret := mig.GetMemoryInfo()
					check(t, "MIG memory", memory.Total, ret, want.Memory*mib)
					// The driver numbers aligned runs of memory slices as a binary tree.
					size := want.MemorySlices
					gi, ret := mig.GetGpuInstanceId()
					check(t, "GPU instance ID", gi, ret, 8/size-1+want.PlacementStart/size)
					isMig, ret := mig.IsMigDeviceHandle()
					check(t, "is a MIG handle", isMig, ret, true)
					parent, ret := mig.GetDeviceHandleFromMigDeviceHandle()
					check(t, "parent", parent, ret, dev)
				}
			}
			// Where each pair of GPUs meets: what NVIDIA's device plugin weighs allocations by.
			for i, a := range doc.Gpus {
				first, _ := lib.DeviceGetHandleByIndex(i)
				for j, b := range doc.Gpus {
					second, _ := lib.DeviceGetHandleByIndex(j)
					want := nvml.TOPOLOGY_SYSTEM
					switch {
					case i == j:
						want = nvml.TOPOLOGY_INTERNAL
					case a.PcieRoot != "" && a.PcieRoot == b.PcieRoot:
						want = nvml.TOPOLOGY_HOSTBRIDGE
					case a.NumaNode != nil && b.NumaNode != nil && *a.NumaNode == *b.NumaNode:
						want = nvml.TOPOLOGY_NODE
					}
					level, ret := lib.DeviceGetTopologyCommonAncestor(first, second)
					check(t, fmt.Sprintf("common ancestor of GPUs %d and %d", i, j), level, ret, want)
				}
			}
			if _, ret := lib.DeviceGetHandleByIndex(len(doc.Gpus)); ret != nvml.ERROR_INVALID_ARGUMENT {
				t.Errorf("a handle past the last GPU: %v, want ERROR_INVALID_ARGUMENT", ret)
			}
		})
	}
}

func errReturn(err error) nvml.Return {
	if err != nil {
		return nvml.ERROR_UNKNOWN
	}
	return nvml.SUCCESS
}

// A container sees the GPUs its NVIDIA_VISIBLE_DEVICES names, numbered from 0.
func TestAContainerSeesItsGpusOnly(t *testing.T) {
	path := "../../nvml/tests/documents/a100-mig.yml"
	doc := read(t, path)
	lib := session(t, path, doc.Gpus[1].MigDevices[0].UUID)
	count, ret := lib.DeviceGetCount()
	check(t, "device count", count, ret, 1)
	dev, _ := lib.DeviceGetHandleByIndex(0)
	uuid, ret := dev.GetUUID()
	check(t, "UUID", uuid, ret, doc.Gpus[1].ID)
	index, ret := dev.GetIndex()
	check(t, "index", index, ret, 0)
	minor, ret := dev.GetMinorNumber()
	check(t, "minor", minor, ret, 1)
}

// Functions the library does not implement answer ERROR_NOT_SUPPORTED, and a machine without a
// document reads as one without a driver.
func TestWhatIsNotThere(t *testing.T) {
	path := "../../nvml/tests/documents/h100.yml"
	lib := session(t, path, "")
	dev, _ := lib.DeviceGetHandleByIndex(0)
	if _, ret := dev.GetFanSpeed(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("fan speed: %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if _, ret := dev.GetGpuFabricInfo(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("fabric info: %v, want ERROR_NOT_SUPPORTED", ret)
	}
	if _, ret := dev.GetGpuInstanceId(); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GPU instance ID of a whole GPU: %v, want ERROR_NOT_SUPPORTED", ret)
	}
}

// A GPU container sees its own pod's use of a GPU as its main process (PID 1 in its PID
// namespace), with the framebuffer the pod holds, and no other pod's: the real driver shows a
// container only its own namespace's processes. (The host's view, with host PIDs, is checked
// on the real node: nvml/src/host.rs, e2e/tests/real_node.rs.) go-nvml asks for the count first, with no
// array, then fills one. Graphics and MPS lists answer with none rather than an error.
func TestAContainerSeesItsOwnProcess(t *testing.T) {
	held := `  index: 0
  status:
    allocatedBy: {namespace: ml, pod: train-0, container: main}
    podGpuUsageStatus:
      uid-train: {utilization: {min: 10, max: 10}, fbUsed: 1000, useKnativeUtilization: false}
`
	other := `  index: 1
  status:
    allocatedBy: {namespace: ml, pod: serve-0, container: main}
    podGpuUsageStatus:
      uid-serve: {utilization: {min: 10, max: 10}, fbUsed: 2000, useKnativeUtilization: false}
`
	text := strings.Replace(strings.Replace(h100(t), "  index: 0\n", held, 1), "  index: 1\n", other, 1)
	path := filepath.Join(t.TempDir(), "topology.yml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	noInstance := ^uint32(0)
	lists := func(t *testing.T, what string, handle nvml.Device, want []nvml.ProcessInfo) {
		t.Helper()
		processes, ret := handle.GetComputeRunningProcesses()
		if ret != nvml.SUCCESS || fmt.Sprint(processes) != fmt.Sprint(want) {
			t.Errorf("%s compute processes: %v, %v; want %v", what, processes, ret, want)
		}
		for kind, list := range map[string]func() ([]nvml.ProcessInfo, nvml.Return){
			"graphics": handle.GetGraphicsRunningProcesses,
			"MPS":      handle.GetMPSComputeRunningProcesses,
		} {
			if processes, ret := list(); ret != nvml.SUCCESS || len(processes) != 0 {
				t.Errorf("%s %s processes: %v, %v; want none", what, kind, processes, ret)
			}
		}
	}

	t.Run("the pod holding GPU 0, by its host name", func(t *testing.T) {
		t.Setenv("HOSTNAME", "train-0")
		lib := session(t, path, "")
		gpu0, _ := lib.DeviceGetHandleByIndex(0)
		gpu1, _ := lib.DeviceGetHandleByIndex(1)
		lists(t, "GPU 0", gpu0, []nvml.ProcessInfo{{Pid: 1, UsedGpuMemory: 1000 * mib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}})
		lists(t, "GPU 1 (another pod's)", gpu1, nil)
		// The name the process was started by, as nvidia-smi prints it.
		cmdline, err := os.ReadFile("/proc/1/cmdline")
		if err != nil {
			t.Fatal(err)
		}
		name, ret := lib.SystemGetProcessName(1)
		check(t, "name of PID 1", name, ret, strings.SplitN(string(cmdline), "\x00", 2)[0])
		// How busy it keeps the GPU (nvitop's %SM and %GMBW): its pod's draw, 10 % here.
		samples, ret := gpu0.GetProcessUtilization(0)
		if ret != nvml.SUCCESS || len(samples) != 1 || samples[0].Pid != 1 || samples[0].SmUtil != 10 || samples[0].MemUtil != 4 {
			t.Errorf("GPU 0 process utilization: %+v, %v; want PID 1 at 10 %% SM, 4 %% memory", samples, ret)
		}
		if _, ret := gpu1.GetProcessUtilization(0); ret != nvml.ERROR_NOT_FOUND {
			t.Errorf("GPU 1 (another pod's) process utilization: %v, want ERROR_NOT_FOUND", ret)
		}
		// The versioned temperature query (nvitop asks it first) reads the same sensor.
		plain, ret := gpu0.GetTemperature(nvml.TEMPERATURE_GPU)
		check(t, "GPU 0 temperature", plain, ret, 34)
		versioned, ret := gpu0.GetTemperatureV().V1()
		check(t, "GPU 0 temperature (versioned)", versioned.Temperature, ret, int32(plain))
	})

	t.Run("a container given GPU 1", func(t *testing.T) {
		t.Setenv("HOSTNAME", "elsewhere")
		lib := session(t, path, read(t, path).Gpus[1].ID)
		gpu, _ := lib.DeviceGetHandleByIndex(0)
		lists(t, "its GPU", gpu, []nvml.ProcessInfo{{Pid: 1, UsedGpuMemory: 2000 * mib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}})
	})

	// None of the document's pods: every pod's process that this machine's /proc shows (by
	// the kubelet's cgroups), and there are none of these pods here.
	t.Run("a host without those pods, or another pod's container", func(t *testing.T) {
		t.Setenv("HOSTNAME", "elsewhere")
		lib := session(t, path, "")
		for i := 0; i < 2; i++ {
			gpu, _ := lib.DeviceGetHandleByIndex(i)
			lists(t, fmt.Sprintf("GPU %d", i), gpu, nil)
		}
	})

	t.Run("a container given a MIG instance", func(t *testing.T) {
		original, err := os.ReadFile("../../nvml/tests/documents/a100-mig.yml")
		if err != nil {
			t.Fatal(err)
		}
		// Pods on the 2g.20gb instance (placement 4: the driver's GI 5) and the 1g.10gb one.
		onInstances := strings.Replace(strings.Replace(string(original),
			"    memory: 19968\n", "    memory: 19968\n    status:\n      podGpuUsageStatus:\n        uid-mig: {utilization: {min: 5, max: 5}, fbUsed: 3000}\n", 1),
			"    memory: 9856\n", "    memory: 9856\n    status:\n      podGpuUsageStatus:\n        uid-small: {utilization: {min: 5, max: 5}, fbUsed: 500}\n", 1)
		migPath := filepath.Join(t.TempDir(), "topology.yml")
		if err := os.WriteFile(migPath, []byte(onInstances), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Setenv("HOSTNAME", "elsewhere")
		doc := read(t, migPath)
		lib := session(t, migPath, doc.Gpus[1].MigDevices[1].UUID)
		gpu, _ := lib.DeviceGetHandleByIndex(0)
		mig, ret := gpu.GetMigDeviceHandleByIndex(0)
		if ret != nvml.SUCCESS {
			t.Fatalf("its MIG device: %v", ret)
		}
		want := []nvml.ProcessInfo{{Pid: 1, UsedGpuMemory: 3000 * mib, GpuInstanceId: 5, ComputeInstanceId: 0}}
		lists(t, "its MIG device", mig, want)
		lists(t, "the MIG device's GPU", gpu, want)
	})
}

// Without a document the library reads as a machine without a driver, and stays uninitialised.
func TestNoDocumentIsNoDriver(t *testing.T) {
	t.Setenv("FAKEGPU_NVML_TOPOLOGY", filepath.Join(t.TempDir(), "missing.yml"))
	lib := nvml.New(nvml.WithLibraryPath(library(t)))
	if ret := lib.Init(); ret != nvml.ERROR_DRIVER_NOT_LOADED {
		t.Errorf("Init without a document: %v, want ERROR_DRIVER_NOT_LOADED", ret)
		lib.Shutdown()
	}
}

// eventSession loads the library against a copy of the h100 document (which the test then
// rewrites to inject faults) and creates an event set freed when the test ends. Returns the
// document's original text, the copy's path, the library and the set.
func eventSession(t *testing.T) ([]byte, string, nvml.Interface, nvml.EventSet) {
	t.Helper()
	original := []byte(h100(t))
	path := filepath.Join(t.TempDir(), "topology.yml")
	if err := os.WriteFile(path, original, 0o644); err != nil {
		t.Fatal(err)
	}
	lib := session(t, path, "")
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		t.Fatalf("EventSetCreate: %v", ret)
	}
	t.Cleanup(func() { set.Free() })
	return original, path, lib, set
}

// A GPU the document marks unhealthy (the operator does for fakegpu.dev/unhealthy-gpus) raises
// a critical XID error, as NVIDIA's device plugin waits for one, once; and the document is read
// again while the caller waits, so a fault injected later is seen.
func TestAnUnhealthyGpuRaisesAnXidError(t *testing.T) {
	original, path, lib, set := eventSession(t)
	var devices []nvml.Device
	for i := 0; i < 2; i++ {
		dev, _ := lib.DeviceGetHandleByIndex(i)
		supported, ret := dev.GetSupportedEventTypes()
		check(t, "XID among the supported events", supported&nvml.EventTypeXidCriticalError != 0, ret, true)
		if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			t.Fatalf("RegisterEvents: %v", ret)
		}
		devices = append(devices, dev)
	}
	if _, ret := set.Wait(100); ret != nvml.ERROR_TIMEOUT {
		t.Fatalf("healthy GPUs: %v, want ERROR_TIMEOUT", ret)
	}
	doc := read(t, path)
	faulty := strings.Replace(string(original), "  index: 1\n", "  index: 1\n  health: Unhealthy\n", 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = os.WriteFile(path, []byte(faulty), 0o644)
	}()
	event, ret := set.Wait(5000)
	if ret != nvml.SUCCESS {
		t.Fatalf("after the fault: %v", ret)
	}
	uuid, _ := event.Device.GetUUID()
	check(t, "faulty GPU", uuid, ret, doc.Gpus[1].ID)
	check(t, "event type", event.EventType, ret, uint64(nvml.EventTypeXidCriticalError))
	check(t, "XID", event.EventData, ret, uint64(79))
	check(t, "GPU instance of a whole GPU", event.GpuInstanceId, ret, uint32(0xFFFFFFFF))
	if event.Device != devices[1] {
		t.Errorf("the event's handle is not GPU 1's")
	}
	if _, ret := set.Wait(100); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("the same fault again: %v, want ERROR_TIMEOUT", ret)
	}
}

// The sensors follow fakegpu's model (model/src/telemetry.rs, what the exporter and fakegpu's
// nvidia-smi show): GPU 0 runs a pod at 40 % holding 30000 MiB and has injected ECC errors,
// GPU 1 is idle and thermally throttled. The expected values are the model's for a 700 W H100.
func TestSensorsFollowTheModel(t *testing.T) {
	original := h100(t)
	busy := `  index: 0
  faults:
    eccCorrectable: 5
    eccUncorrectable: 2
  status:
    allocatedBy: {namespace: team-a, pod: train-0, container: main}
    podGpuUsageStatus:
      uid-1: {utilization: {min: 40, max: 40}, fbUsed: 30000, useKnativeUtilization: false}
`
	text := strings.Replace(original, "  index: 0\n", busy, 1)
	text = strings.Replace(text, "  index: 1\n", "  index: 1\n  faults: {thermalThrottling: true}\n", 1)
	path := filepath.Join(t.TempDir(), "topology.yml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := session(t, path, "")
	for i, want := range []struct {
		temperature, powerMw, sm, utilization, memoryUtilization uint32
		usedMiB, corrected, uncorrected                          uint64
	}{
		{48, 322000, 1980, 40, 16, 30000, 5, 2},
		{90, 70000, 345, 0, 0, 0, 0, 0},
	} {
		dev, _ := lib.DeviceGetHandleByIndex(i)
		what := func(name string) string { return fmt.Sprintf("GPU %d %s", i, name) }
		temperature, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU)
		check(t, what("temperature"), temperature, ret, want.temperature)
		power, ret := dev.GetPowerUsage()
		check(t, what("power mW"), power, ret, want.powerMw)
		limit, ret := dev.GetPowerManagementLimit()
		check(t, what("power limit mW"), limit, ret, uint32(700000))
		enforced, ret := dev.GetEnforcedPowerLimit()
		check(t, what("enforced power limit mW"), enforced, ret, uint32(700000))
		sm, ret := dev.GetClockInfo(nvml.CLOCK_SM)
		check(t, what("SM clock"), sm, ret, want.sm)
		memoryClock, ret := dev.GetClockInfo(nvml.CLOCK_MEM)
		check(t, what("memory clock"), memoryClock, ret, uint32(2619))
		maxSm, ret := dev.GetMaxClockInfo(nvml.CLOCK_SM)
		check(t, what("max SM clock"), maxSm, ret, uint32(1980))
		utilization, ret := dev.GetUtilizationRates()
		check(t, what("utilization"), utilization.Gpu, ret, want.utilization)
		check(t, what("memory utilization"), utilization.Memory, ret, want.memoryUtilization)
		memory, ret := dev.GetMemoryInfo()
		check(t, what("memory used"), memory.Used, ret, want.usedMiB*mib)
		check(t, what("memory free"), memory.Free, ret, (81559-want.usedMiB)*mib)
		corrected, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
		check(t, what("corrected ECC errors"), corrected, ret, want.corrected)
		uncorrected, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC)
		check(t, what("uncorrected ECC errors"), uncorrected, ret, want.uncorrected)
		// Field values answer each field on its own: the GPU scope's power from the same
		// model, any other field or scope not supported.
		fields := []nvml.FieldValue{
			{FieldId: nvml.FI_DEV_POWER_INSTANT},
			{FieldId: nvml.FI_DEV_POWER_CURRENT_LIMIT},
			{FieldId: nvml.FI_DEV_POWER_CURRENT_LIMIT, ScopeId: 1},
			{FieldId: nvml.FI_DEV_ECC_CURRENT},
		}
		if ret := dev.GetFieldValues(fields); ret != nvml.SUCCESS {
			t.Fatalf("%s: %v", what("field values"), ret)
		}
		uint := func(f nvml.FieldValue) uint32 {
			return uint32(f.Value[0]) | uint32(f.Value[1])<<8 | uint32(f.Value[2])<<16 | uint32(f.Value[3])<<24
		}
		check(t, what("power field mW"), uint(fields[0]), nvml.Return(fields[0].NvmlReturn), want.powerMw)
		check(t, what("power limit field mW"), uint(fields[1]), nvml.Return(fields[1].NvmlReturn), uint32(700000))
		for _, f := range fields[2:] {
			if nvml.Return(f.NvmlReturn) != nvml.ERROR_NOT_SUPPORTED {
				t.Errorf("%s field %d scope %d: %v, want ERROR_NOT_SUPPORTED", what(""), f.FieldId, f.ScopeId, nvml.Return(f.NvmlReturn))
			}
		}
	}
}

// A process keeps its handles from Init on while pods come and go and their utilization draws
// move: readings follow the document as it is at each call, drawn as the exporter draws them
// (a new value each FAKEGPU_UTILIZATION_INTERVAL_SECONDS, here 1 s), without a new Init.
func TestReadingsFollowTheDocumentAndTheDraws(t *testing.T) {
	original := h100(t)
	busy := `  index: 0
  status:
    podGpuUsageStatus:
      uid-1: {utilization: {min: 0, max: 100}, fbUsed: 1000, useKnativeUtilization: false}
`
	text := strings.Replace(original, "  index: 0\n", busy, 1)
	path := filepath.Join(t.TempDir(), "topology.yml")
	write := func(text string) {
		t.Helper()
		// As the node agent writes it: beside the file, then renamed over it.
		staged := path + ".tmp"
		if err := os.WriteFile(staged, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(staged, path); err != nil {
			t.Fatal(err)
		}
	}
	write(text)
	t.Setenv("FAKEGPU_UTILIZATION_INTERVAL_SECONDS", "1")
	lib := session(t, path, "")
	gpu0, _ := lib.DeviceGetHandleByIndex(0)
	gpu1, _ := lib.DeviceGetHandleByIndex(1)

	seen := map[uint32]bool{}
	for deadline := time.Now().Add(10 * time.Second); len(seen) < 3 && time.Now().Before(deadline); {
		utilization, ret := gpu0.GetUtilizationRates()
		if ret != nvml.SUCCESS || utilization.Gpu > 100 {
			t.Fatalf("utilization %v: %v", utilization.Gpu, ret)
		}
		seen[utilization.Gpu] = true
		time.Sleep(150 * time.Millisecond)
	}
	if len(seen) < 3 {
		t.Errorf("a pod drawing from 0-100 read only %v over 10 one-second periods", seen)
	}

	memory, ret := gpu1.GetMemoryInfo()
	check(t, "GPU 1 memory used before its pod", memory.Used, ret, uint64(0))
	joined := `  index: 1
  status:
    podGpuUsageStatus:
      uid-2: {utilization: {min: 100, max: 100}, fbUsed: 2000, useKnativeUtilization: false}
`
	write(strings.Replace(text, "  index: 1\n", joined, 1))
	memory, ret = gpu1.GetMemoryInfo()
	check(t, "GPU 1 memory used once a pod holds it", memory.Used, ret, uint64(2000*mib))
	utilization, ret := gpu1.GetUtilizationRates()
	check(t, "GPU 1 utilization once a pod holds it", utilization.Gpu, ret, uint32(100))
	temperature, ret := gpu1.GetTemperature(nvml.TEMPERATURE_GPU)
	check(t, "GPU 1 temperature at full load", temperature, ret, uint32(75))
}

// MIG profiles and instances as the driver numbers them: go-nvlib names a MIG device's
// profile from its GPU and compute instance and their profiles (NVIDIA's device plugin calls
// its `nvidia.com/mig-*` resources by that name), and lists the profiles a GPU offers from
// the GPU-instance profile queries. An A100 80GB offers what `nvidia-smi mig -lgip` lists.
func TestMigProfilesAreTheDrivers(t *testing.T) {
	path := "../../nvml/tests/documents/a100-mig.yml"
	doc := read(t, path)
	lib := session(t, path, "")
	devices := device.New(lib)

	whole, _ := lib.DeviceGetHandleByIndex(0)
	wrapped, err := devices.NewDevice(whole)
	if err != nil {
		t.Fatal(err)
	}
	profiles, err := wrapped.GetMigProfiles()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range profiles {
		if info := p.GetInfo(); info.C == info.G {
			names = append(names, p.String())
		}
	}
	// go-nvlib lists a profile once per compute-instance profile index of its size
	// (1_SLICE and 1_SLICE_REV1 are both one slice), whatever the library answers.
	slices.Sort(names)
	names = slices.Compact(names)
	want := []string{"1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"}
	if !slices.Equal(names, want) {
		t.Errorf("profiles of an A100 80GB: %v, want %v", names, want)
	}
	// go-nvlib adds the compute-instance subdivisions of each (1c.3g.40gb, ...).
	if len(profiles) <= len(want) {
		t.Errorf("%d profiles: no compute-instance profiles", len(profiles))
	}

	threeG, ret := whole.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_3_SLICE)
	check(t, "3g profile ID", threeG.Id, ret, 9)
	check(t, "3g memory", threeG.MemorySizeMB, ret, 40192)
	placements, ret := whole.GetGpuInstancePossiblePlacements(&threeG)
	check(t, "3g placements", fmt.Sprint(placements), ret, "[{0 4} {4 4}]")
	oneG, ret := whole.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_1_SLICE)
	check(t, "1g profile ID", oneG.Id, ret, 19)
	left, ret := whole.GetGpuInstanceRemainingCapacity(&oneG)
	check(t, "1g instances left on an empty GPU", left, ret, 7)
	if _, ret := whole.GetGpuInstanceProfileInfo(nvml.GPU_INSTANCE_PROFILE_8_SLICE); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("an 8-slice profile on an A100: %v, want ERROR_NOT_SUPPORTED", ret)
	}
	v3, ret := whole.GetGpuInstanceProfileInfoV(nvml.GPU_INSTANCE_PROFILE_7_SLICE).V3()
	check(t, "7g name (v3)", cString(v3.Name[:]), ret, "MIG 7g.80gb")
	check(t, "7g slices (v3)", v3.SliceCount, ret, 7)

	split, _ := lib.DeviceGetHandleByIndex(1)
	full, ret := split.GetGpuInstanceRemainingCapacity(&oneG)
	check(t, "1g instances left beside 4g + 2g + 1g", full, ret, 0)
	wrappedSplit, err := devices.NewDevice(split)
	if err != nil {
		t.Fatal(err)
	}
	migs, err := wrappedSplit.GetMigDevices()
	if err != nil {
		t.Fatal(err)
	}
	for j, want := range doc.Gpus[1].MigDevices {
		profile, err := migs[j].GetProfile()
		if err != nil {
			t.Fatalf("MIG device %d: %v", j, err)
		}
		check(t, "go-nvlib's profile name", profile.String(), nvml.SUCCESS, want.Profile)

		giID, _ := migs[j].GetGpuInstanceId()
		gi, ret := split.GetGpuInstanceById(giID)
		if ret != nvml.SUCCESS {
			t.Fatalf("GPU instance %d: %v", giID, ret)
		}
		info, ret := gi.GetInfo()
		check(t, "GPU instance ID", info.Id, ret, uint32(giID))
		check(t, "placement", fmt.Sprint(info.Placement), ret, fmt.Sprintf("{%d %d}", want.PlacementStart, want.MemorySlices))
		check(t, "GPU instance's device", info.Device, ret, split)
		ci, ret := gi.GetComputeInstanceById(0)
		if ret != nvml.SUCCESS {
			t.Fatalf("compute instance 0 of GPU instance %d: %v", giID, ret)
		}
		ciInfo, ret := ci.GetInfo()
		check(t, "compute instance's GPU instance", ciInfo.GpuInstance, ret, gi)
		attributes, ret := migs[j].GetAttributes()
		check(t, "compute instance spans the GPU instance", ciInfo.Placement.Size, ret, attributes.GpuInstanceSliceCount)
		check(t, "MIG memory (attributes)", attributes.MemorySizeMB, ret, want.Memory)
		// Compute-instance profiles are named as `nvidia-smi mig -lcip` lists them.
		whole, ret := gi.GetComputeInstanceProfileInfoV(int(ciInfo.ProfileId), nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED).V2()
		check(t, "spanning compute-instance profile", cString(whole.Name[:]), ret, "MIG "+want.Profile)
		if attributes.GpuInstanceSliceCount > 1 {
			one, ret := gi.GetComputeInstanceProfileInfoV(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED).V2()
			check(t, "one-slice compute-instance profile", cString(one.Name[:]), ret, "MIG 1c."+want.Profile)
		}
		// What NVIDIA's nvidia-smi needs for a row of its MIG devices table: the device's
		// index under its GPU, its BAR1 share (a MiB less than the slices' share of the
		// aperture, as drivers report it) and its ECC counter.
		index, ret := migs[j].GetIndex()
		check(t, "MIG device index", index, ret, j)
		bar1, ret := migs[j].GetBAR1MemoryInfo()
		check(t, "MIG BAR1 total", bar1.Bar1Total, ret, uint64(want.MemorySlices*16384-1)*mib)
		check(t, "MIG BAR1 used", bar1.Bar1Used, ret, 0)
		errors, ret := migs[j].GetMemoryErrorCounter(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC, nvml.MEMORY_LOCATION_SRAM)
		check(t, "MIG uncorrected volatile errors", errors, ret, 0)
	}
	if _, ret := split.GetGpuInstanceById(99); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("a GPU instance that is not there: %v, want ERROR_NOT_FOUND", ret)
	}
}

// Injected ECC errors raise NVML's ECC events as their counts rise, in sets registered for
// them: corrected errors a single-bit event, uncorrected ones a double-bit event (whose XID 48
// goes only to sets registered for XIDs).
func TestInjectedEccErrorsRaiseEccEvents(t *testing.T) {
	original, path, lib, set := eventSession(t)
	dev, _ := lib.DeviceGetHandleByIndex(0)
	ecc := uint64(nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError)
	if ret := dev.RegisterEvents(ecc, set); ret != nvml.SUCCESS {
		t.Fatalf("RegisterEvents: %v", ret)
	}
	inject := func(faults string) {
		text := strings.Replace(string(original), "  index: 0\n", "  index: 0\n  faults: "+faults+"\n", 1)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		faults string
		want   uint64
	}{
		{"{eccCorrectable: 2}", nvml.EventTypeSingleBitEccError},
		{"{eccCorrectable: 2, eccUncorrectable: 1}", nvml.EventTypeDoubleBitEccError},
	} {
		inject(step.faults)
		event, ret := set.Wait(5000)
		if ret != nvml.SUCCESS {
			t.Fatalf("after %s: %v", step.faults, ret)
		}
		check(t, "event type after "+step.faults, event.EventType, ret, step.want)
		check(t, "event data of an ECC event", event.EventData, ret, uint64(0))
		if event.Device != dev {
			t.Errorf("the event's handle is not GPU 0's")
		}
	}
	if _, ret := set.Wait(300); ret != nvml.ERROR_TIMEOUT {
		t.Errorf("no new errors: %v, want ERROR_TIMEOUT", ret)
	}
}

// A container that NVIDIA's container toolkit gave GPUs on a `backend: mock` node has the
// driver root's library but no document beside it: the library asks the driver-root agent's
// socket (nvidia-persistenced's, which the toolkit mounts; here one this test serves with the
// agent's protocol, api/src/document_socket.rs), follows the document it answers, keeps the
// last one while the agent is away, and sees the GPUs whose device node the container has
// (NVIDIA_VISIBLE_DEVICES is void under CDI), as NVML does.
func TestAToolkitContainerAsksTheDriverRootsSocket(t *testing.T) {
	held := func(fb int) string {
		return fmt.Sprintf(`  index: 1
  status:
    allocatedBy: {namespace: ml, pod: cuda-job, container: main}
    podGpuUsageStatus:
      uid-job: {utilization: {min: 10, max: 10}, fbUsed: %d, useKnativeUtilization: false}
`, fb)
	}
	served := strings.Replace(h100(t), "  index: 1\n", held(1000), 1)
	var mu sync.Mutex
	dir := t.TempDir()
	socket := filepath.Join(dir, "socket")
	listener, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			request := make([]byte, len("fakegpu-topology-document\n"))
			if _, err := io.ReadFull(conn, request); err == nil && string(request) == "fakegpu-topology-document\n" {
				mu.Lock()
				io.WriteString(conn, served)
				mu.Unlock()
			}
			conn.Close()
		}
	}()
	t.Cleanup(func() { listener.Close() })
	dev := filepath.Join(dir, "dev")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, node := range []string{"nvidiactl", "nvidia-uvm", "nvidia1"} {
		if err := os.WriteFile(filepath.Join(dev, node), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("FAKEGPU_NVML_TOPOLOGY", "")
	os.Unsetenv("FAKEGPU_NVML_TOPOLOGY")
	t.Setenv("FAKEGPU_NVML_SOCKET", socket)
	t.Setenv("FAKEGPU_NVML_DEVICE_DIR", dev)
	t.Setenv("NVIDIA_VISIBLE_DEVICES", "void")
	t.Setenv("HOSTNAME", "cuda-job")
	lib := nvml.New(nvml.WithLibraryPath(library(t)))
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init: %v", ret)
	}
	t.Cleanup(func() { lib.Shutdown() })

	doc := read(t, "../../nvml/tests/documents/h100.yml")
	count, ret := lib.DeviceGetCount()
	check(t, "device count", count, ret, 1)
	gpu, _ := lib.DeviceGetHandleByIndex(0)
	uuid, ret := gpu.GetUUID()
	check(t, "UUID", uuid, ret, doc.Gpus[1].ID)
	minor, ret := gpu.GetMinorNumber()
	check(t, "minor", minor, ret, 1)
	noInstance := ^uint32(0)
	processes, ret := gpu.GetComputeRunningProcesses()
	want := []nvml.ProcessInfo{{Pid: 1, UsedGpuMemory: 1000 * mib, GpuInstanceId: noInstance, ComputeInstanceId: noInstance}}
	if ret != nvml.SUCCESS || fmt.Sprint(processes) != fmt.Sprint(want) {
		t.Errorf("its pod's process: %v, %v; want %v", processes, ret, want)
	}

	// The agent answers with the document of the moment.
	mu.Lock()
	served = strings.Replace(h100(t), "  index: 1\n", held(3000), 1)
	mu.Unlock()
	var memory nvml.Memory
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if memory, ret = gpu.GetMemoryInfo(); ret != nvml.SUCCESS || memory.Used == 3000*mib {
			break
		}
	}
	check(t, "memory used once the pod holds more", memory.Used, ret, uint64(3000*mib))

	// The agent restarts (a container keeps the socket it was started with): the last
	// document stands.
	listener.Close()
	time.Sleep(300 * time.Millisecond)
	memory, ret = gpu.GetMemoryInfo()
	check(t, "memory used while the agent is away", memory.Used, ret, uint64(3000*mib))
}
