package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const gpuResource = "nvidia.com/gpu"

// TestDevicePlugin walks the agent's device plugin through a kubelet's life: registration,
// devices, preferred allocation, Allocate, a health change, a malformed request and
// document, a kubelet restart, and the agent's shutdown.
func TestDevicePlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster := newCluster(t, ctx)
	node := "harness-dp"
	gpus := []gpu{{index: 0, zone: 0}, {index: 1, zone: 0}, {index: 2, zone: 1}, {index: 3, zone: 1}}
	cluster.writeTopology(t, ctx, node, gpus)

	dir := t.TempDir()
	kubelet := startKubelet(t, dir)
	agent := startAgent(t, cluster, node, map[string]string{"FAKEGPU_DEVICE_PLUGIN_DIR": dir, "FAKEGPU_DRA": "false"})

	p := kubelet.waitConnected(t, gpuResource)
	devices := kubelet.waitDevices(t, func(d []*api.Device) bool { return len(d) == 4 })
	for _, d := range sortedByID(devices) {
		if d.Health != api.Healthy {
			t.Errorf("device %s: health %q, want Healthy", d.ID, d.Health)
		}
	}
	byID := map[string]*api.Device{}
	for _, d := range devices {
		byID[d.ID] = d
	}
	for _, g := range gpus {
		d, ok := byID[gpuUUID(node, g.index)]
		if !ok {
			t.Fatalf("GPU %d (%s) not among the devices %v", g.index, gpuUUID(node, g.index), devices)
		}
		if got := d.Topology.GetNodes(); len(got) != 1 || got[0].ID != int64(g.zone) {
			t.Errorf("GPU %d: NUMA nodes %v, want [%d]", g.index, got, g.zone)
		}
	}

	agent.waitReady(t)
	agent.waitMetric(t, "fakegpu_node_agent_gpus", "4")
	agent.waitMetric(t, `fakegpu_node_agent_registered{plugin="device-plugin"}`, "1")

	options, err := p.API().GetDevicePluginOptions(ctx, &api.Empty{})
	if err != nil || !options.GetPreferredAllocationAvailable || options.PreStartRequired {
		t.Fatalf("GetDevicePluginOptions = %v, %v", options, err)
	}

	// Zone 0 has one free GPU, zone 1 two: a request for two stays in zone 1.
	preferred, err := p.API().GetPreferredAllocation(ctx, &api.PreferredAllocationRequest{
		ContainerRequests: []*api.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{gpuUUID(node, 0), gpuUUID(node, 2), gpuUUID(node, 3)},
			AllocationSize:     2,
		}},
	})
	if err != nil {
		t.Fatalf("GetPreferredAllocation: %v", err)
	}
	want := []string{gpuUUID(node, 2), gpuUUID(node, 3)}
	if got := preferred.ContainerResponses[0].DeviceIDs; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("preferred %v, want %v", got, want)
	}

	allocated, err := p.API().Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{
		{DevicesIds: []string{gpuUUID(node, 1), gpuUUID(node, 3)}},
	}})
	if err != nil {
		t.Fatalf("Allocate: %v", err)
	}
	envs := allocated.ContainerResponses[0].Envs
	if got, want := envs["NVIDIA_VISIBLE_DEVICES"], gpuUUID(node, 1)+","+gpuUUID(node, 3); got != want {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want %q", got, want)
	}
	if envs["NODE_NAME"] != node {
		t.Errorf("NODE_NAME = %q, want %q", envs["NODE_NAME"], node)
	}
	if got, want := envs["FAKEGPU_EXPORTER_URL"], "http://fakegpu-exporter."+cluster.namespace+".svc:9400"; got != want {
		t.Errorf("FAKEGPU_EXPORTER_URL = %q, want %q", got, want)
	}

	_, err = p.API().Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{
		{DevicesIds: []string{"GPU-not-on-this-node"}},
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Allocate of an unknown device: %v, want InvalidArgument", err)
	}
	agent.waitMetric(t, `fakegpu_node_agent_calls_total{method="Allocate",outcome="error"}`, "1")

	// A GPU turning unhealthy reaches the kubelet on the open ListAndWatch stream.
	gpus[1].unhealthy = true
	cluster.writeTopology(t, ctx, node, gpus)
	kubelet.waitDevices(t, func(d []*api.Device) bool {
		for _, x := range d {
			if x.ID == gpuUUID(node, 1) {
				return x.Health == api.Unhealthy
			}
		}
		return false
	})

	agent.waitMetric(t, "fakegpu_node_agent_unhealthy_gpus", "1")

	// A document edited into garbage is ignored: the agent keeps serving the last good one.
	cluster.writeRawTopology(t, ctx, node, "gpus: [unclosed")
	agent.waitMetric(t, "fakegpu_node_agent_topology_errors_total", "1")
	if _, err := p.API().Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{
		{DevicesIds: []string{gpuUUID(node, 0)}},
	}}); err != nil {
		t.Fatalf("Allocate after a malformed document: %v", err)
	}

	// The kubelet restarts: it empties the directory and serves a new registration socket.
	kubelet.restart(t)
	kubelet.waitConnected(t, gpuResource)
	kubelet.waitDevices(t, func(d []*api.Device) bool { return len(d) == 4 })

	agent.signal(t, syscall.SIGTERM)
	if code := agent.wait(t, 20*time.Second); code != 0 {
		t.Errorf("agent exited with %d after SIGTERM", code)
	}
	if _, err := os.Stat(filepath.Join(dir, "nvidia-gpu.sock")); !os.IsNotExist(err) {
		t.Errorf("plugin socket still there after shutdown: %v", err)
	}
}

// TestAllocateLatency reports Allocate and GetPreferredAllocation latency over the socket,
// through the kubelet's client. It reports; it asserts nothing about time.
func TestAllocateLatency(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster := newCluster(t, ctx)
	node := "harness-latency"
	var gpus []gpu
	for i := 0; i < 8; i++ {
		gpus = append(gpus, gpu{index: i, zone: i / 4})
	}
	cluster.writeTopology(t, ctx, node, gpus)
	dir := t.TempDir()
	kubelet := startKubelet(t, dir)
	startAgent(t, cluster, node, map[string]string{"FAKEGPU_DEVICE_PLUGIN_DIR": dir, "FAKEGPU_DRA": "false"})
	p := kubelet.waitConnected(t, gpuResource)
	kubelet.waitDevices(t, func(d []*api.Device) bool { return len(d) == 8 })

	all := make([]string, 0, 8)
	for _, g := range gpus {
		all = append(all, gpuUUID(node, g.index))
	}
	report(t, "Allocate (2 GPUs)", 2000, func() error {
		_, err := p.API().Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{
			{DevicesIds: all[:2]},
		}})
		return err
	})
	report(t, "GetPreferredAllocation (2 of 8)", 2000, func() error {
		_, err := p.API().GetPreferredAllocation(ctx, &api.PreferredAllocationRequest{
			ContainerRequests: []*api.ContainerPreferredAllocationRequest{{AvailableDeviceIDs: all, AllocationSize: 2}},
		})
		return err
	})
}

func sortedByID(devices []*api.Device) []*api.Device {
	out := append([]*api.Device(nil), devices...)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// migInstance is a MIG instance of GPU 0 in a test document.
type migInstance struct {
	profile string
	start   int
}

// migDocument is an A100 80GB node of a mixed-strategy pool: GPU 0 cut into instances, GPU 1
// whole.
func migDocument(node string, instances []migInstance) string {
	var b strings.Builder
	fmt.Fprintf(&b, "version: 1\npool: harness\ngpuMemory: 81920\ngpuProduct: NVIDIA A100-SXM4-80GB\n")
	fmt.Fprintf(&b, "driverVersion: 550.163.01\ncudaVersion: '12.4'\nmigStrategy: mixed\ngpus:\n")
	fmt.Fprintf(&b, "- id: %s\n  index: 0\n  migDevices:\n", gpuUUID(node, 0))
	for _, m := range instances {
		fmt.Fprintf(&b, "  - {uuid: %s, profile: %s, giProfileId: 0, placementStart: %d, memorySlices: 1, computeSlices: 1, memory: 9856, multiprocessors: 14}\n",
			migUUID(node, 0, m.start), m.profile, m.start)
	}
	fmt.Fprintf(&b, "  status: {}\n- id: %s\n  index: 1\n  status: {}\n", gpuUUID(node, 1))
	return b.String()
}

// TestMigDevicePlugins checks the mixed strategy: one plugin per MIG profile next to
// nvidia.com/gpu, each registered with the kubelet's device manager and listing its
// instances, Allocate limited to the plugin's own devices, and plugins following the layout.
func TestMigDevicePlugins(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster := newCluster(t, ctx)
	node := "harness-mig"
	cluster.writeRawTopology(t, ctx, node, migDocument(node, []migInstance{{"1g.10gb", 0}, {"1g.10gb", 1}, {"3g.40gb", 4}}))

	dir := t.TempDir()
	kubelet := startKubelet(t, dir)
	agent := startAgent(t, cluster, node, map[string]string{"FAKEGPU_DEVICE_PLUGIN_DIR": dir, "FAKEGPU_DRA": "false"})

	ids := func(devices []*api.Device) string {
		var out []string
		for _, d := range sortedByID(devices) {
			out = append(out, d.ID)
		}
		return strings.Join(out, ",")
	}
	sorted := func(uuids ...string) string {
		sort.Strings(uuids)
		return strings.Join(uuids, ",")
	}
	// The partitioned GPU is not an nvidia.com/gpu device; the whole one is.
	kubelet.waitConnected(t, gpuResource)
	kubelet.waitDevices(t, func(d []*api.Device) bool { return ids(d) == gpuUUID(node, 1) })
	small := kubelet.waitConnected(t, "nvidia.com/mig-1g.10gb")
	kubelet.waitResourceDevices(t, "nvidia.com/mig-1g.10gb", func(d []*api.Device) bool {
		return ids(d) == sorted(migUUID(node, 0, 0), migUUID(node, 0, 1))
	})
	kubelet.waitConnected(t, "nvidia.com/mig-3g.40gb")
	kubelet.waitResourceDevices(t, "nvidia.com/mig-3g.40gb", func(d []*api.Device) bool {
		return ids(d) == migUUID(node, 0, 4)
	})
	for _, socket := range []string{"nvidia-gpu.sock", "nvidia-mig-1g.10gb.sock", "nvidia-mig-3g.40gb.sock"} {
		if _, err := os.Stat(filepath.Join(dir, socket)); err != nil {
			t.Errorf("plugin socket %s: %v", socket, err)
		}
	}
	agent.waitMetric(t, `fakegpu_node_agent_registered{plugin="device-plugin/nvidia.com/mig-1g.10gb"}`, "1")

	allocated, err := small.API().Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{
		{DevicesIds: []string{migUUID(node, 0, 1)}},
	}})
	if err != nil {
		t.Fatalf("Allocate of a 1g.10gb instance: %v", err)
	}
	if got := allocated.ContainerResponses[0].Envs["NVIDIA_VISIBLE_DEVICES"]; got != migUUID(node, 0, 1) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES = %q, want the instance's UUID", got)
	}
	_, err = small.API().Allocate(ctx, &api.AllocateRequest{ContainerRequests: []*api.ContainerAllocateRequest{
		{DevicesIds: []string{migUUID(node, 0, 4)}},
	}})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("Allocate of a 3g.40gb instance through the 1g.10gb plugin: %v, want InvalidArgument", err)
	}

	// The layout changes: 2g.20gb replaces the 1g.10gb instances, whose plugin goes with its socket.
	cluster.writeRawTopology(t, ctx, node, migDocument(node, []migInstance{{"2g.20gb", 0}, {"3g.40gb", 4}}))
	kubelet.waitConnected(t, "nvidia.com/mig-2g.20gb")
	kubelet.waitResourceDevices(t, "nvidia.com/mig-2g.20gb", func(d []*api.Device) bool {
		return ids(d) == migUUID(node, 0, 0)
	})
	deadline := time.Now().Add(waitFor)
	for {
		if _, err := os.Stat(filepath.Join(dir, "nvidia-mig-1g.10gb.sock")); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the 1g.10gb plugin's socket is still there")
		}
		time.Sleep(100 * time.Millisecond)
	}
	agent.waitMetric(t, `fakegpu_node_agent_registered{plugin="device-plugin/nvidia.com/mig-1g.10gb"}`, "0")
}
