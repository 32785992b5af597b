// Command controlplane is a multi-call binary holding every Kubernetes component that fakegpu's
// local cluster needs: the control plane, kubectl, and the kubelet and kube-proxy of
// hack/node.sh's real node.
// One link instead of seven saves minutes on a two-core machine.
//
// The component is chosen by the name the binary is invoked under (hack/cluster.sh creates
// symlinks) or, failing that, by the first argument: `controlplane kube-apiserver --help`.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata" // CronJob time zones, as the upstream binaries do

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/server/v3/etcdmain"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	kubectl "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	kcm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	kubeproxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
	scheduler "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

// components maps an invocation name to the function that runs it and returns the exit code.
// Each runs alone in its process: klog and the global flag set are process-wide.
var components = map[string]func(args []string) int{
	"etcd": func(args []string) int {
		etcdmain.Main(append([]string{"etcd"}, args...))
		return 0
	},
	"kube-apiserver":          runCobra(apiserver.NewAPIServerCommand),
	"kube-controller-manager": runCobra(kcm.NewControllerManagerCommand),
	"kube-scheduler": runCobra(func() *cobra.Command {
		return scheduler.NewSchedulerCommand()
	}),
	"kubelet": runCobra(func() *cobra.Command {
		return kubelet.NewKubeletCommand(context.Background())
	}),
	"kube-proxy": runCobra(kubeproxy.NewProxyCommand),
	"kubectl": func(args []string) int {
		os.Args = append([]string{"kubectl"}, args...)
		logs.GlogSetter(kubectl.GetLogVerbosity(os.Args)) //nolint:errcheck
		if err := cli.RunNoErrOutput(kubectl.NewDefaultKubectlCommand()); err != nil {
			kubectlutil.CheckErr(err)
		}
		return 0
	},
}

func runCobra(newCommand func() *cobra.Command) func(args []string) int {
	return func(args []string) int {
		command := newCommand()
		command.SetArgs(args)
		return cli.Run(command)
	}
}

func main() {
	name, args := filepath.Base(os.Args[0]), os.Args[1:]
	run, ok := components[name]
	if !ok && len(args) > 0 {
		name, args = args[0], args[1:]
		run, ok = components[name]
	}
	if !ok {
		fmt.Fprintln(os.Stderr, "usage: controlplane {etcd|kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kube-proxy|kubectl} [flags]")
		os.Exit(2)
	}
	os.Exit(run(args))
}
