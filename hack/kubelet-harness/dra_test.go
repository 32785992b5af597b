package harness

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/record"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	draplugin "k8s.io/kubernetes/pkg/kubelet/cm/dra/plugin"
	"k8s.io/kubernetes/pkg/kubelet/pluginmanager"
)

const gpuDriver = "gpu.nvidia.com"

type allSourcesReady struct{}

func (allSourcesReady) AddSource(string) {}
func (allSourcesReady) AllReady() bool   { return true }

// TestDRAPlugin runs the kubelet's plugin manager (watching a plugins_registry directory) with
// the kubelet's DRA plugin manager as the DRAPlugin handler, and the agent as the DRA driver:
// registration, the node's ResourceSlice, NodePrepareResources and the CDI spec it writes, a
// refused claim, an agent restart with the claim deleted meanwhile (only the checkpoint knows
// it), NodeUnprepareResources, and a deleted slice put back.
func TestDRAPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster := newCluster(t, ctx)
	node := "harness-dra-" + rand.String(5)
	gpus := []gpu{{index: 0, zone: 0}, {index: 1, zone: 0}}
	dra, registry, plugins, cdiDir := startDRAKubelet(t, ctx, cluster, node, gpus)

	env := map[string]string{"FAKEGPU_DEVICE_PLUGIN": "false", "FAKEGPU_PLUGINS_REGISTRY_DIR": registry,
		"FAKEGPU_PLUGINS_DIR": plugins, "FAKEGPU_CDI_DIR": cdiDir}
	agent := startAgent(t, cluster, node, env)

	slice := waitSlice(t, ctx, cluster, node, func(s *resourcev1.ResourceSlice) bool { return len(s.Spec.Devices) == 2 })
	if slice.Spec.Driver != gpuDriver || slice.Spec.NodeName == nil || *slice.Spec.NodeName != node || slice.Spec.Pool.Name != node {
		t.Errorf("slice spec %+v: want driver %s, node and pool %s", slice.Spec, gpuDriver, node)
	}
	if uuid := slice.Spec.Devices[1].Attributes["uuid"].StringValue; uuid == nil || *uuid != gpuUUID(node, 1) {
		t.Errorf("gpu-1 uuid attribute %v, want %s", uuid, gpuUUID(node, 1))
	}

	claim := allocatedClaim(t, ctx, cluster, node, "gpu-1")
	request := &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}}
	prepared := prepare(t, ctx, dra, request)
	result := prepared.Claims[string(claim.UID)]
	if result == nil || result.Error != "" || len(result.Devices) != 1 {
		t.Fatalf("prepare result %+v", result)
	}
	device := result.Devices[0]
	wantIDs := []string{"k8s.gpu.nvidia.com/claim=common", "k8s.gpu.nvidia.com/claim=" + string(claim.UID) + "-gpu-1"}
	agent.waitReady(t)
	agent.waitMetric(t, "fakegpu_node_agent_prepared_claims", "1")
	if device.DeviceName != "gpu-1" || device.PoolName != node || strings.Join(device.CdiDeviceIds, " ") != strings.Join(wantIDs, " ") ||
		strings.Join(device.RequestNames, ",") != "gpu" {
		t.Errorf("prepared device %+v, want gpu-1 in pool %s with CDI IDs %v", device, node, wantIDs)
	}
	spec := readCDISpec(t, filepath.Join(cdiDir, "k8s.gpu.nvidia.com-claim_"+string(claim.UID)+".json"))
	if spec.Kind != "k8s.gpu.nvidia.com/claim" || len(spec.Devices) != 1 || spec.Devices[0].Name != string(claim.UID)+"-gpu-1" {
		t.Errorf("claim CDI spec %+v", spec)
	}
	if got := strings.Join(spec.ContainerEdits.Env, " "); got != "NVIDIA_VISIBLE_DEVICES="+gpuUUID(node, 1) {
		t.Errorf("claim spec env %q", got)
	}
	common := readCDISpec(t, filepath.Join(cdiDir, "k8s.gpu.nvidia.com-claim_common.json"))
	// nvidia-smi in the container asks the exporter of the agent's namespace for the node's GPUs.
	wantCommon := "NODE_NAME=" + node + " FAKEGPU_EXPORTER_URL=http://fakegpu-exporter." + cluster.namespace + ".svc:9400"
	if len(common.Devices) != 1 || strings.Join(common.Devices[0].ContainerEdits.Env, " ") != wantCommon {
		t.Errorf("common CDI spec %+v", common)
	}

	refused := prepare(t, ctx, dra, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: claim.Namespace, Name: "no-such-claim", Uid: "0000"}}})
	if r := refused.Claims["0000"]; r == nil || !strings.Contains(r.Error, "not found") {
		t.Errorf("prepare of a missing claim: %+v, want a not-found error", r)
	}

	// The claim goes from the API; the agent restarts. Only its checkpoint knows the claim now.
	if err := cluster.client.ResourceV1().ResourceClaims(claim.Namespace).Delete(ctx, claim.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting claim: %v", err)
	}
	agent.signal(t, syscall.SIGTERM)
	if code := agent.wait(t, 20*time.Second); code != 0 {
		t.Fatalf("agent exited with %d", code)
	}
	time.Sleep(2 * time.Second) // past the DRA manager's wiping delay: the slice goes
	startAgent(t, cluster, node, env)
	again := prepare(t, ctx, dra, request)
	if r := again.Claims[string(claim.UID)]; r == nil || r.Error != "" || len(r.Devices) != 1 || r.Devices[0].DeviceName != "gpu-1" {
		t.Errorf("prepare after restart: %+v, want the checkpointed gpu-1", r)
	}
	waitSlice(t, ctx, cluster, node, func(s *resourcev1.ResourceSlice) bool { return len(s.Spec.Devices) == 2 })

	unprepare := &drapb.NodeUnprepareResourcesRequest{Claims: request.Claims}
	for round := 0; round < 2; round++ { // the second time the claim is unknown: still fine
		plugin, err := dra.GetPlugin(gpuDriver)
		if err != nil {
			t.Fatalf("plugin: %v", err)
		}
		done, err := plugin.NodeUnprepareResources(ctx, unprepare)
		if err != nil || done.Claims[string(claim.UID)] == nil || done.Claims[string(claim.UID)].Error != "" {
			t.Fatalf("unprepare round %d: %+v, %v", round, done, err)
		}
	}
	if _, err := os.Stat(filepath.Join(cdiDir, "k8s.gpu.nvidia.com-claim_"+string(claim.UID)+".json")); !os.IsNotExist(err) {
		t.Errorf("claim CDI spec still there after unprepare: %v", err)
	}

	// Someone deletes the slice: the agent puts it back.
	if err := cluster.client.ResourceV1().ResourceSlices().Delete(ctx, node+"-gpu.nvidia.com", metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("deleting slice: %v", err)
	}
	time.Sleep(500 * time.Millisecond)
	waitSlice(t, ctx, cluster, node, func(s *resourcev1.ResourceSlice) bool { return len(s.Spec.Devices) == 2 })

	// Latency through the kubelet's client: a claim prepared before (the checkpoint answers),
	// and prepare + unprepare of a fresh claim (API read, CDI spec and checkpoint written).
	plugin, err := dra.GetPlugin(gpuDriver)
	if err != nil {
		t.Fatalf("plugin: %v", err)
	}
	fresh := allocatedClaim(t, ctx, cluster, node, "gpu-0")
	freshRequest := []*drapb.Claim{{Namespace: fresh.Namespace, Name: fresh.Name, Uid: string(fresh.UID)}}
	prepare(t, ctx, dra, &drapb.NodePrepareResourcesRequest{Claims: freshRequest})
	report(t, "NodePrepareResources (prepared before)", 1000, func() error {
		_, err := plugin.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: freshRequest})
		return err
	})
	report(t, "NodeUnprepareResources + NodePrepareResources (API read, files written)", 300, func() error {
		if _, err := plugin.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: freshRequest}); err != nil {
			return err
		}
		_, err := plugin.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: freshRequest})
		return err
	})
}

// startDRAKubelet creates node with gpus in its topology document and runs the kubelet's plugin
// manager (watching a fresh plugins_registry directory) with its DRA manager as the DRAPlugin
// handler; it returns the DRA manager and the registry, plugins and CDI directories.
func startDRAKubelet(t *testing.T, ctx context.Context, cluster *cluster, node string, gpus []gpu) (*draplugin.DRAPluginManager, string, string, string) {
	t.Helper()
	n, err := cluster.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node: %v", err)
	}
	t.Cleanup(func() {
		_ = cluster.client.CoreV1().Nodes().Delete(context.Background(), node, metav1.DeleteOptions{})
	})
	cluster.writeTopology(t, ctx, node, gpus)
	registry, plugins, cdiDir := t.TempDir(), t.TempDir(), t.TempDir()
	dra := draplugin.NewDRAPluginManager(ctx, cluster.client, func(context.Context) (*corev1.Node, error) { return n, nil }, nil, time.Second)
	t.Cleanup(dra.Stop)
	manager := pluginmanager.NewPluginManager(registry, record.NewFakeRecorder(100))
	manager.AddHandler("DRAPlugin", dra)
	stop := make(chan struct{})
	go manager.Run(ctx, allSourcesReady{}, stop)
	t.Cleanup(func() { close(stop) })
	return dra, registry, plugins, cdiDir
}

// prepare calls NodePrepareResources through the kubelet's DRA client, waiting for the driver
// to be registered and reachable.
func prepare(t *testing.T, ctx context.Context, dra *draplugin.DRAPluginManager, request *drapb.NodePrepareResourcesRequest) *drapb.NodePrepareResourcesResponse {
	t.Helper()
	return prepareWith(t, ctx, dra, gpuDriver, request)
}

// prepareWith is prepare for the plugin of driver.
func prepareWith(t *testing.T, ctx context.Context, dra *draplugin.DRAPluginManager, driver string, request *drapb.NodePrepareResourcesRequest) *drapb.NodePrepareResourcesResponse {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		plugin, err := dra.GetPlugin(driver)
		if err == nil {
			var response *drapb.NodePrepareResourcesResponse
			response, err = plugin.NodePrepareResources(ctx, request)
			if err == nil {
				return response
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("NodePrepareResources: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func waitSlice(t *testing.T, ctx context.Context, c *cluster, node string, ok func(*resourcev1.ResourceSlice) bool) *resourcev1.ResourceSlice {
	t.Helper()
	return waitSliceNamed(t, ctx, c, node+"-gpu.nvidia.com", ok)
}

// waitSliceNamed waits until slice name exists and satisfies ok.
func waitSliceNamed(t *testing.T, ctx context.Context, c *cluster, name string, ok func(*resourcev1.ResourceSlice) bool) *resourcev1.ResourceSlice {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		slice, err := c.client.ResourceV1().ResourceSlices().Get(ctx, name, metav1.GetOptions{})
		if err == nil && ok(slice) {
			return slice
		}
		if time.Now().After(deadline) {
			t.Fatalf("slice %s: %v %+v", name, err, slice)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// allocatedClaim creates a claim for one GPU and writes the allocation the scheduler would.
func allocatedClaim(t *testing.T, ctx context.Context, c *cluster, node, device string) *resourcev1.ResourceClaim {
	t.Helper()
	claims := c.client.ResourceV1().ResourceClaims(c.namespace)
	claim, err := claims.Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "gpu-"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: gpuDriver}},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating claim: %v", err)
	}
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "gpu", Driver: gpuDriver, Pool: node, Device: device}},
	}}
	claim, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("allocating claim: %v", err)
	}
	return claim
}

type cdiSpec struct {
	Kind           string `json:"kind"`
	ContainerEdits struct {
		Env []string `json:"env"`
	} `json:"containerEdits"`
	Devices []struct {
		Name           string `json:"name"`
		ContainerEdits struct {
			Env []string `json:"env"`
		} `json:"containerEdits"`
	} `json:"devices"`
}

func readCDISpec(t *testing.T, path string) cdiSpec {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading CDI spec: %v", err)
	}
	var spec cdiSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("CDI spec %s: %v", path, err)
	}
	return spec
}
