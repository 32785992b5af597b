// Package harness drives fakegpu's node agent with the kubelet's own code: the device
// manager's registration server and plugin client (k8s.io/kubernetes/pkg/kubelet/cm/
// devicemanager/plugin/v1beta1), over real Unix sockets in temporary directories.
//
// The tests need a running API server (KUBECONFIG, as hack/test.sh provides) for the node's
// topology ConfigMap, and the agent binary (FAKEGPU_NODE_AGENT):
//
//	FAKEGPU_NODE_AGENT=$PWD/target/debug/fakegpu-node-agent KUBECONFIG=... \
//	  go -C hack/kubelet-harness test ./... -count=1 -v
package harness
