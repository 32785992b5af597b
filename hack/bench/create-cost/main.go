// Command create-cost measures what one create of fakegpu's per-node objects costs
// kube-apiserver in CPU, sent with a JSON body (as the operator sends them) and with a protobuf
// body (which the API server also accepts for built-in kinds), in alternating blocks of fresh
// objects. hack/bench/create-cost.sh runs it against a fresh local control plane with samples
// the operator wrote. Not a test: nothing is asserted; it prints a Markdown table.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const protobuf = "application/vnd.kubernetes.protobuf"

// Field manager of the creates: fakegpu's own.
const fieldManager = "fakegpu"

// apiserverCPU is kube-apiserver's CPU seconds so far (user and system, from /proc).
func apiserverCPU(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	stat := string(raw)
	// Fields after the command name, which is in parentheses and may hold spaces.
	fields := strings.Fields(stat[strings.LastIndex(stat, ")")+2:])
	if len(fields) < 13 {
		return 0, errors.New("short /proc stat line")
	}
	user, err := strconv.ParseFloat(fields[11], 64)
	if err != nil {
		return 0, err
	}
	system, err := strconv.ParseFloat(fields[12], 64)
	if err != nil {
		return 0, err
	}
	// Clock ticks: 100 a second on Linux.
	return (user + system) / 100, nil
}

// creator creates copy number i of a sample under a new name.
type creator func(ctx context.Context, client kubernetes.Interface, name string) error

func configMapCreator(sample *corev1.ConfigMap, namespace string) creator {
	return func(ctx context.Context, client kubernetes.Interface, name string) error {
		object := sample.DeepCopy()
		object.ObjectMeta = fresh(&sample.ObjectMeta, name)
		_, err := client.CoreV1().ConfigMaps(namespace).Create(ctx, object, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}
}

func sliceCreator(sample *resourcev1.ResourceSlice) creator {
	return func(ctx context.Context, client kubernetes.Interface, name string) error {
		object := sample.DeepCopy()
		object.ObjectMeta = fresh(&sample.ObjectMeta, name)
		// A pool of its own, as every node's slice has.
		object.Spec.Pool.Name = name
		_, err := client.ResourceV1().ResourceSlices().Create(ctx, object, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}
}

// fresh is the sample's metadata as the operator sends it (labels, annotations, owner), named
// anew.
func fresh(sample *metav1.ObjectMeta, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            name,
		Labels:          sample.Labels,
		Annotations:     sample.Annotations,
		OwnerReferences: sample.OwnerReferences,
	}
}

func load(path string) (runtime.Object, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	object, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	return object, err
}

// createAll creates n copies with `workers` requests in flight; how many failed, and the first
// error.
func createAll(ctx context.Context, client kubernetes.Interface, create creator, prefix string, n, workers int) (int, error) {
	names := make(chan string)
	var mu sync.Mutex
	failed := 0
	var first error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range names {
				if err := create(ctx, client, name); err != nil {
					mu.Lock()
					failed++
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		names <- fmt.Sprintf("%s-%05d", prefix, i)
	}
	close(names)
	wg.Wait()
	return failed, first
}

func main() {
	configMap := flag.String("configmap", "", "a topology ConfigMap the operator wrote (JSON)")
	slice := flag.String("slice", "", "a ResourceSlice the operator wrote (JSON)")
	namespace := flag.String("namespace", "create-cost", "namespace of the ConfigMaps (must exist)")
	n := flag.Int("n", 2000, "objects per block")
	workers := flag.Int("concurrency", 8, "creates in flight")
	blocks := flag.String("blocks", "json,protobuf,protobuf,json", "body of each block, in order")
	idle := flag.Duration("idle", 10*time.Second, "how long the API server's idle floor is measured before each block")
	flag.Parse()

	if err := run(*configMap, *slice, *namespace, *n, *workers, strings.Split(*blocks, ","), *idle); err != nil {
		fmt.Fprintln(os.Stderr, "create-cost:", err)
		os.Exit(1)
	}
}

func run(configMapPath, slicePath, namespace string, n, workers int, blocks []string, idle time.Duration) error {
	pidText, err := os.ReadFile(filepath.Join(os.Getenv("FAKEGPU_CLUSTER_DIR"), "run", "kube-apiserver.pid"))
	if err != nil {
		return fmt.Errorf("kube-apiserver pid (FAKEGPU_CLUSTER_DIR): %w", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidText)))
	if err != nil {
		return err
	}
	config, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		return err
	}
	// The client's own rate limit is not what is measured.
	config.QPS, config.Burst = 100000, 100000

	kinds := []struct {
		name   string
		path   string
		create func(runtime.Object) (creator, error)
	}{
		{"ConfigMap", configMapPath, func(o runtime.Object) (creator, error) {
			if cm, ok := o.(*corev1.ConfigMap); ok {
				return configMapCreator(cm, namespace), nil
			}
			return nil, fmt.Errorf("%s is not a ConfigMap", configMapPath)
		}},
		{"ResourceSlice", slicePath, func(o runtime.Object) (creator, error) {
			if s, ok := o.(*resourcev1.ResourceSlice); ok {
				return sliceCreator(s), nil
			}
			return nil, fmt.Errorf("%s is not a ResourceSlice", slicePath)
		}},
	}
	fmt.Println("| kind | body | creates | wall s | API server CPU ms/create | less idle floor |")
	fmt.Println("|---|---|---|---|---|---|")
	ctx := context.Background()
	for _, kind := range kinds {
		if kind.path == "" {
			continue
		}
		sample, err := load(kind.path)
		if err != nil {
			return fmt.Errorf("%s: %w", kind.path, err)
		}
		create, err := kind.create(sample)
		if err != nil {
			return err
		}
		for i, body := range blocks {
			blockConfig := rest.CopyConfig(config)
			switch body {
			case "json":
			case "protobuf":
				blockConfig.ContentType = protobuf
			default:
				return fmt.Errorf("block %q is neither json nor protobuf", body)
			}
			client, err := kubernetes.NewForConfig(blockConfig)
			if err != nil {
				return err
			}
			before, err := apiserverCPU(pid)
			if err != nil {
				return err
			}
			time.Sleep(idle)
			after, err := apiserverCPU(pid)
			if err != nil {
				return err
			}
			floor := (after - before) / idle.Seconds()
			started := time.Now()
			prefix := fmt.Sprintf("cc-%s-%d", strings.ToLower(kind.name), i)
			failed, first := createAll(ctx, client, create, prefix, n, workers)
			if failed > 0 {
				return fmt.Errorf("%d of %d %s creates failed, first: %w", failed, n, kind.name, first)
			}
			wall := time.Since(started).Seconds()
			end, err := apiserverCPU(pid)
			if err != nil {
				return err
			}
			cpu := end - after
			fmt.Printf("| %s | %s | %d | %.1f | %.2f | %.2f |\n", kind.name, body, n, wall,
				cpu/float64(n)*1000, (cpu-floor*wall)/float64(n)*1000)
		}
	}
	return nil
}
