package harness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	api "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	plugin "k8s.io/kubernetes/pkg/kubelet/cm/devicemanager/plugin/v1beta1"
)

const waitFor = 30 * time.Second

// gpuUUID is the topology document's GPU id: "GPU-" + UUIDv5(nil namespace, "<node>-<index>").
func gpuUUID(node string, index int) string {
	return "GPU-" + uuid.NewSHA1(uuid.Nil, []byte(fmt.Sprintf("%s-%d", node, index))).String()
}

// migUUID is a MIG instance's id: "MIG-" + UUIDv5(nil namespace, "<node>-<index>-mig-<start>").
func migUUID(node string, index, start int) string {
	return "MIG-" + uuid.NewSHA1(uuid.Nil, []byte(fmt.Sprintf("%s-%d-mig-%d", node, index, start))).String()
}

type gpu struct {
	index, zone int
	unhealthy   bool
}

// cluster is the API server the agent reads its topology ConfigMap from, with a namespace of
// the test's own.
type cluster struct {
	client kubernetes.Interface
	// kubeconfig is the agent's: FAKEGPU_AGENT_KUBECONFIG (the bundle's node-agent
	// ServiceAccount, as hack/test.sh runs it), else the admin's.
	kubeconfig string
	namespace  string
}

func newCluster(t *testing.T, ctx context.Context) *cluster {
	t.Helper()
	kubeconfig := os.Getenv("KUBECONFIG")
	if kubeconfig == "" {
		t.Fatal("KUBECONFIG must point at a running API server (hack/test.sh sets it)")
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatalf("kubeconfig: %v", err)
	}
	client := kubernetes.NewForConfigOrDie(config)
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-harness-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the test namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = client.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	// The agent's ServiceAccount reads topology documents here as it does in fakegpu-system.
	_, err = client.RbacV1().RoleBindings(ns.Name).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "fakegpu-node-agent-topology-reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "fakegpu-node-agent-topology-reader"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "fakegpu-node-agent", Namespace: "fakegpu-system"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("binding the topology reader role: %v", err)
	}
	agentKubeconfig := os.Getenv("FAKEGPU_AGENT_KUBECONFIG")
	if agentKubeconfig == "" {
		agentKubeconfig = kubeconfig
	}
	return &cluster{client: client, kubeconfig: agentKubeconfig, namespace: ns.Name}
}

// topologyDocument writes what the operator writes for a node of an H100 pool.
func topologyDocument(node string, gpus []gpu) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "version: 1\npool: harness\ngpuMemory: 81559\ngpuProduct: NVIDIA H100 80GB HBM3\n")
	fmt.Fprintf(&b, "driverVersion: 550.163.01\ncudaVersion: '12.4'\nmigStrategy: none\ngpus:\n")
	for _, g := range gpus {
		fmt.Fprintf(&b, "- id: %s\n  index: %d\n  numaNode: %d\n  pciBusId: %04x:%02x:00.0\n  pcieRoot: pci%04x:00\n",
			gpuUUID(node, g.index), g.index, g.zone, g.zone, g.index+1, g.zone)
		if g.unhealthy {
			b.WriteString("  health: Unhealthy\n")
		}
		b.WriteString("  status: {}\n")
	}
	return b.String()
}

func (c *cluster) writeTopology(t *testing.T, ctx context.Context, node string, gpus []gpu) {
	t.Helper()
	c.writeRawTopology(t, ctx, node, topologyDocument(node, gpus))
}

func (c *cluster) writeRawTopology(t *testing.T, ctx context.Context, node, document string) {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:   "topology-" + node,
			Labels: map[string]string{"node-topology": "true", "node-name": node},
		},
		Data: map[string]string{"topology.yml": document},
	}
	api := c.client.CoreV1().ConfigMaps(c.namespace)
	_, err := api.Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, cm, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("writing the topology ConfigMap: %v", err)
	}
}

// kubelet is the kubelet's device plugin registration server, with a handler that records
// what the kubelet's plugin client hears.
type kubelet struct {
	dir     string
	server  plugin.Server
	mu      sync.Mutex
	plugins map[string]plugin.DevicePlugin
	events  chan string
	devices chan deviceUpdate
	// pending holds events and updates read while waiting for another resource's.
	pendingEvents  []string
	pendingDevices []deviceUpdate
}

// deviceUpdate is one ListAndWatch update of one resource's plugin.
type deviceUpdate struct {
	resource string
	devices  []*api.Device
}

func startKubelet(t *testing.T, dir string) *kubelet {
	t.Helper()
	k := &kubelet{dir: dir, plugins: map[string]plugin.DevicePlugin{},
		events: make(chan string, 16), devices: make(chan deviceUpdate, 64)}
	k.start(t)
	t.Cleanup(func() { _ = k.server.Stop(klog.Background()) })
	return k
}

func (k *kubelet) start(t *testing.T) {
	t.Helper()
	server, err := plugin.NewServer(klog.Background(), filepath.Join(k.dir, api.KubeletSocket[len(api.DevicePluginPath):]), k, k)
	if err != nil {
		t.Fatalf("kubelet registration server: %v", err)
	}
	if err := server.Start(klog.Background()); err != nil {
		t.Fatalf("starting the kubelet registration server: %v", err)
	}
	k.server = server
}

// restart is what a kubelet restart does to the directory: stop, empty it, serve anew.
func (k *kubelet) restart(t *testing.T) {
	t.Helper()
	if err := k.server.Stop(klog.Background()); err != nil {
		t.Fatalf("stopping the kubelet registration server: %v", err)
	}
	k.start(t)
}

// CleanupPluginDirectory removes every file, as the kubelet's device manager does on start.
func (k *kubelet) CleanupPluginDirectory(_ klog.Logger, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func (k *kubelet) PluginConnected(_ context.Context, resource string, p plugin.DevicePlugin) error {
	k.mu.Lock()
	k.plugins[resource] = p
	k.mu.Unlock()
	k.events <- "connected " + resource
	return nil
}

func (k *kubelet) PluginDisconnected(_ klog.Logger, resource, _ string) {
	k.events <- "disconnected " + resource
}

func (k *kubelet) PluginListAndWatchReceiver(_ klog.Logger, resource string, resp *api.ListAndWatchResponse) {
	k.devices <- deviceUpdate{resource: resource, devices: resp.Devices}
}

// waitConnected waits for resource's plugin to connect; other resources' events are kept for
// their own waits.
func (k *kubelet) waitConnected(t *testing.T, resource string) plugin.DevicePlugin {
	t.Helper()
	want := "connected " + resource
	found := func() plugin.DevicePlugin {
		k.mu.Lock()
		defer k.mu.Unlock()
		return k.plugins[resource]
	}
	for i, event := range k.pendingEvents {
		if event == want {
			k.pendingEvents = append(k.pendingEvents[:i], k.pendingEvents[i+1:]...)
			return found()
		}
	}
	deadline := time.After(waitFor)
	for {
		select {
		case event := <-k.events:
			if event == want {
				return found()
			}
			k.pendingEvents = append(k.pendingEvents, event)
		case <-deadline:
			t.Fatalf("no %s plugin registered within %v", resource, waitFor)
		}
	}
}

// waitDevices returns the first nvidia.com/gpu ListAndWatch update that satisfies ok.
func (k *kubelet) waitDevices(t *testing.T, ok func([]*api.Device) bool) []*api.Device {
	t.Helper()
	return k.waitResourceDevices(t, gpuResource, ok)
}

// waitResourceDevices returns the first ListAndWatch update of resource that satisfies ok.
func (k *kubelet) waitResourceDevices(t *testing.T, resource string, ok func([]*api.Device) bool) []*api.Device {
	t.Helper()
	var last []*api.Device
	pending := k.pendingDevices
	k.pendingDevices = nil
	for i, update := range pending {
		if update.resource != resource {
			k.pendingDevices = append(k.pendingDevices, update)
			continue
		}
		if ok(update.devices) {
			k.pendingDevices = append(k.pendingDevices, pending[i+1:]...)
			return update.devices
		}
		last = update.devices
	}
	deadline := time.After(waitFor)
	for {
		select {
		case update := <-k.devices:
			if update.resource != resource {
				k.pendingDevices = append(k.pendingDevices, update)
				continue
			}
			if ok(update.devices) {
				return update.devices
			}
			last = update.devices
		case <-deadline:
			t.Fatalf("no matching %s ListAndWatch update within %v; last: %v", resource, waitFor, last)
		}
	}
}

// agent is the node agent under test, run as a process.
type agent struct {
	cmd  *exec.Cmd
	done chan int
	log  *syncBuffer
	http string // its /metrics, /healthz, /readyz address
}

// get fetches one of the agent's HTTP endpoints.
func (a *agent) get(path string) (int, string) {
	resp, err := http.Get("http://" + a.http + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// waitMetric waits until the agent's /metrics has a line `series value`.
func (a *agent) waitMetric(t *testing.T, series, value string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		_, body := a.get("/metrics")
		for _, line := range strings.Split(body, "\n") {
			if line == series+" "+value {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("metric %s never became %s; /metrics:\n%s", series, value, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitReady waits until the agent's /readyz answers 200.
func (a *agent) waitReady(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		code, body := a.get("/readyz")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not ready: %d %s", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeAddress is a loopback address with a port nothing listens on right now.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startAgent(t *testing.T, c *cluster, node string, env map[string]string) *agent {
	t.Helper()
	binary := os.Getenv("FAKEGPU_NODE_AGENT")
	if binary == "" {
		t.Fatal("FAKEGPU_NODE_AGENT must name the node agent binary (hack/test.sh sets it)")
	}
	cmd := exec.Command(binary)
	address := freeAddress(t)
	// The agent installs its nvidia-smi, and writes the node's document for containers' NVML
	// library; here into the test's own directory, not the host's /var/lib/fakegpu. It reads no real kubelet's PodResources either: the
	// harness serves none, and a real node's kubelet on this host is another node.
	dir := t.TempDir()
	cmd.Env = append(os.Environ(), "NODE_NAME="+node, "FAKEGPU_NAMESPACE="+c.namespace,
		"KUBECONFIG="+c.kubeconfig, "RUST_LOG=info", "NO_COLOR=1", "FAKEGPU_HTTP_ADDR="+address,
		"FAKEGPU_NVIDIA_SMI="+filepath.Join(dir, "nvidia-smi"), "FAKEGPU_NVML_DIR="+filepath.Join(dir, "nvml"),
		"FAKEGPU_POD_RESOURCES_SOCKET="+filepath.Join(dir, "pod-resources.sock"))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the agent: %v", err)
	}
	a := &agent{cmd: cmd, done: make(chan int, 1), log: log, http: address}
	go func() {
		_ = cmd.Wait()
		a.done <- cmd.ProcessState.ExitCode()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("agent log:\n%s", log.String())
		}
	})
	return a
}

func (a *agent) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := a.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signalling the agent: %v", err)
	}
}

func (a *agent) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case code := <-a.done:
		return code
	case <-time.After(timeout):
		t.Fatalf("agent still running after %v", timeout)
		return -1
	}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// report runs call n times and logs the latency percentiles.
func report(t *testing.T, what string, n int, call func() error) {
	t.Helper()
	took := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		start := time.Now()
		if err := call(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		took = append(took, time.Since(start))
	}
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	at := func(p float64) time.Duration { return took[int(p*float64(n-1))] }
	t.Logf("%s over the socket, %d calls: p50 %v, p90 %v, p99 %v, max %v", what, n, at(0.5), at(0.9), at(0.99), took[n-1])
}
