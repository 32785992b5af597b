package harness

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
)

const channelDriver = "compute-domain.nvidia.com"

// TestComputeDomainPlugin runs the agent's compute-domain DRA plugin under the kubelet's plugin
// manager and DRA manager: registration, the node's channel slice, a channel claim of a domain
// with allocationMode All prepared into a CDI spec with every IMEX channel, a claim without its
// domain refused, and unprepare.
func TestComputeDomainPlugin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster := newCluster(t, ctx)
	node := "harness-cd-" + rand.String(5)
	dra, registry, plugins, cdiDir := startDRAKubelet(t, ctx, cluster, node, []gpu{{index: 0}})

	agent := startAgent(t, cluster, node, map[string]string{"FAKEGPU_DEVICE_PLUGIN": "false", "FAKEGPU_DRA": "false",
		"FAKEGPU_COMPUTE_DOMAINS": "true", "FAKEGPU_PLUGINS_REGISTRY_DIR": registry,
		"FAKEGPU_PLUGINS_DIR": plugins, "FAKEGPU_CDI_DIR": cdiDir})

	slice := waitSliceNamed(t, ctx, cluster, node+"-"+channelDriver, func(s *resourcev1.ResourceSlice) bool { return len(s.Spec.Devices) == 1 })
	device := slice.Spec.Devices[0]
	if slice.Spec.Driver != channelDriver || slice.Spec.Pool.Name != node || device.Name != "channel-0" {
		t.Errorf("channel slice %+v", slice.Spec)
	}
	if id := device.Attributes["id"].IntValue; id == nil || *id != 0 {
		t.Errorf("channel-0 id attribute %v", id)
	}
	if typ := device.Attributes["type"].StringValue; typ == nil || *typ != "channel" {
		t.Errorf("channel-0 type attribute %v", typ)
	}

	claim := channelClaim(t, ctx, cluster, node, `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"domain-1","allocationMode":"All"}`)
	request := &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: claim.Namespace, Name: claim.Name, Uid: string(claim.UID)}}}
	result := prepareWith(t, ctx, dra, channelDriver, request).Claims[string(claim.UID)]
	if result == nil || result.Error != "" || len(result.Devices) != 1 {
		t.Fatalf("prepare result %+v", result)
	}
	wantID := "k8s.compute-domain.nvidia.com/claim=" + string(claim.UID) + "-channel-0"
	if got := strings.Join(result.Devices[0].CdiDeviceIds, " "); got != wantID {
		t.Errorf("CDI IDs %q, want %q", got, wantID)
	}
	agent.waitMetric(t, `fakegpu_node_agent_registered{plugin="compute-domain"}`, "1")
	specPath := filepath.Join(cdiDir, "k8s.compute-domain.nvidia.com-claim_"+string(claim.UID)+".json")
	data, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatalf("reading the claim's CDI spec: %v", err)
	}
	var spec struct {
		Kind    string `json:"kind"`
		Devices []struct {
			Name           string `json:"name"`
			ContainerEdits struct {
				DeviceNodes []struct {
					Path  string `json:"path"`
					Type  string `json:"type"`
					Major int    `json:"major"`
				} `json:"deviceNodes"`
			} `json:"containerEdits"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatalf("CDI spec: %v", err)
	}
	if spec.Kind != "k8s.compute-domain.nvidia.com/claim" || len(spec.Devices) != 1 {
		t.Fatalf("CDI spec %+v", spec)
	}
	nodes := spec.Devices[0].ContainerEdits.DeviceNodes
	if len(nodes) != 2048 || nodes[0].Path != "/dev/nvidia-caps-imex-channels/channel0" || nodes[2047].Path != "/dev/nvidia-caps-imex-channels/channel2047" || nodes[0].Type != "c" {
		t.Errorf("allocationMode All: %d device nodes, first %+v", len(nodes), nodes[0])
	}

	bare := channelClaim(t, ctx, cluster, node, "")
	refused := prepareWith(t, ctx, dra, channelDriver, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: bare.Namespace, Name: bare.Name, Uid: string(bare.UID)}}})
	if r := refused.Claims[string(bare.UID)]; r == nil || !strings.Contains(r.Error, "ComputeDomainChannelConfig") {
		t.Errorf("a claim without its domain: %+v", r)
	}

	plugin, err := dra.GetPlugin(channelDriver)
	if err != nil {
		t.Fatalf("plugin: %v", err)
	}
	unprepared, err := plugin.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: request.Claims})
	if err != nil || unprepared.Claims[string(claim.UID)].GetError() != "" {
		t.Fatalf("NodeUnprepareResources: %v %+v", err, unprepared)
	}
	if _, err := os.Stat(specPath); !os.IsNotExist(err) {
		t.Errorf("the claim's CDI spec is still there: %v", err)
	}
}

// channelClaim creates a claim for a domain's channel, with config as its opaque parameters
// (none when empty), and writes the allocation the scheduler would.
func channelClaim(t *testing.T, ctx context.Context, c *cluster, node, config string) *resourcev1.ResourceClaim {
	t.Helper()
	claims := c.client.ResourceV1().ResourceClaims(c.namespace)
	spec := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
		{Name: "channel", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "compute-domain-default-channel.nvidia.com"}},
	}}}
	if config != "" {
		spec.Devices.Config = []resourcev1.DeviceClaimConfiguration{{DeviceConfiguration: resourcev1.DeviceConfiguration{
			Opaque: &resourcev1.OpaqueDeviceConfiguration{Driver: channelDriver, Parameters: runtime.RawExtension{Raw: []byte(config)}},
		}}}
	}
	claim, err := claims.Create(ctx, &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{GenerateName: "channel-"}, Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating claim: %v", err)
	}
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{
		Results: []resourcev1.DeviceRequestAllocationResult{{Request: "channel", Driver: channelDriver, Pool: node, Device: "channel-0"}},
	}}
	claim, err = claims.UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("allocating claim: %v", err)
	}
	return claim
}
