// Command pause is the pod sandbox ("pause") container of hack/node.sh's real node. No registry
// is reachable here, so containerd's default sandbox image cannot be pulled; this one is built
// locally and imported. It holds the pod's namespaces open, reaps the zombies of processes
// that re-parent to it (it is PID 1 when the pod shares its process namespace), and exits on
// SIGINT or SIGTERM.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
