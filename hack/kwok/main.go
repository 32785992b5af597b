// Command kwok runs sigs.k8s.io/kwok's controller, plus one extra subcommand, `default-stages`,
// that prints the node and pod Stages KWOK ships embedded in its module. The bare kwok binary
// refuses to start without Stages (kwokctl injects them; we do not use kwokctl), and printing
// them from the module keeps us from carrying a copy that drifts from the pinned release.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/pflag"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodelease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

// defaultStages are the Stages kwokctl installs for a cluster with node leases: nodes become
// Ready and stay so (the Lease is renewed by kwok itself), pods go Running, complete, and are
// removed when deleted.
var defaultStages = []string{
	nodefast.DefaultNodeInit,
	nodelease.DefaultNodeHeartbeatWithLease,
	podfast.DefaultPodReady,
	podfast.DefaultPodComplete,
	podfast.DefaultPodDelete,
}

func main() {
	if len(os.Args) == 2 && os.Args[1] == "default-stages" {
		for _, stage := range defaultStages {
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
