// Command kwok runs sigs.k8s.io/kwok's controller, plus one extra subcommand, `default-stages`,
// that prints the node and pod Stages KWOK ships embedded in its module. The bare kwok binary
// refuses to start without Stages (kwokctl injects them; we do not use kwokctl), and printing
// them from the module keeps us from carrying a copy that drifts from the pinned release. One
// is changed: a Job's pod may run for a while before it succeeds (see podCompleteAfterDelay).
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodelease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/apis/v1alpha1"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

// RunFor is the pod annotation KWOK's general Stages read for how long a pod runs before it
// completes (a Go duration, `90s`); kept here so that users of KWOK's own stages find it.
const RunFor = "pod-complete.stage.kwok.x-k8s.io/delay"

// defaultStages are the Stages kwokctl installs for a cluster with node leases: nodes become
// Ready and stay so (the Lease is renewed by kwok itself), pods go Running, complete, and are
// removed when deleted.
func defaultStages() ([]string, error) {
	podComplete, err := podCompleteAfterDelay()
	if err != nil {
		return nil, err
	}
	return []string{
		nodefast.DefaultNodeInit,
		nodelease.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podComplete,
		podfast.DefaultPodDelete,
	}, nil
}

// podCompleteAfterDelay is KWOK's fast pod-complete Stage (a Job's pod succeeds the moment it
// runs) with the delay its general Stages read from the pod's RunFor annotation: without one,
// a Job's pod succeeds at once as before; with one, it runs (and holds its GPUs, and its
// queue's quota) for that long first.
func podCompleteAfterDelay() (string, error) {
	var stage v1alpha1.Stage
	if err := yaml.UnmarshalStrict([]byte(podfast.DefaultPodComplete), &stage); err != nil {
		return "", fmt.Errorf("KWOK's pod-complete Stage: %w", err)
	}
	stage.Spec.Delay = &v1alpha1.StageDelay{
		DurationFrom: &v1alpha1.ExpressionFrom{
			JQ: &v1alpha1.ExpressionJQ{Expression: fmt.Sprintf(".metadata.annotations[%q]", RunFor)},
		},
	}
	out, err := yaml.Marshal(stage)
	return string(out), err
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "default-stages" {
		stages, err := defaultStages()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		for _, stage := range stages {
			fmt.Printf("---\n%s\n", strings.TrimSpace(stage))
		}
		return
	}

	flagset := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flagset.ParseErrorsAllowlist.UnknownFlags = true
	flagset.Usage = func() {}

	ctx := signals.SetupSignalContext()
	ctx, logger := log.InitFlags(ctx, flagset)
	ctx, err := config.InitFlags(ctx, flagset)
	if err != nil {
		_, _ = os.Stderr.Write([]byte(flagset.FlagUsages()))
		logger.Error("init config flags", "err", err)
		os.Exit(1)
	}

	command := cmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flagset)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("kwok exited", "err", err)
		os.Exit(1)
	}
}
