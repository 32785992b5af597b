// Command kstatus prints the health that sigs.k8s.io/cli-utils' kstatus computes (the rules
// Flux, Argo CD and kpt judge applied objects by) for each object of a `kubectl get -o json`
// document on standard input, one line each: "<kind>/<name>\t<status>\t<message>". The e2e
// suite runs it on GpuNodePools and ComputeDomains (e2e/tests/kstatus.rs).
package main

import (
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	// Numbers as int64, as unstructured objects hold them (encoding/json gives float64).
	"k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	var document unstructured.Unstructured
	if err := json.Unmarshal(data, &document.Object); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	objects := []unstructured.Unstructured{document}
	if document.IsList() {
		list, err := document.ToList()
		if err != nil {
			return err
		}
		objects = list.Items
	}
	for i := range objects {
		result, err := status.Compute(&objects[i])
		if err != nil {
			return fmt.Errorf("%s/%s: %w", objects[i].GetKind(), objects[i].GetName(), err)
		}
		fmt.Fprintf(out, "%s/%s\t%s\t%s\n", objects[i].GetKind(), objects[i].GetName(), result.Status, result.Message)
	}
	return nil
}
