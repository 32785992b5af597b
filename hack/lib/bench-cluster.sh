# shellcheck shell=bash
# shellcheck disable=SC2154 # repo: set by the sourcing script
# The benchmarks' control plane (hack/bench/*.sh): a state directory and ports of its own, so
# a benchmark runs beside a demo cluster (hack/demo.sh) and the test cluster. Every port is
# below Linux's ephemeral range (32768-60999): the operator once failed to bind 38080 while
# one of the API server's closed connections to etcd held that port in TIME-WAIT.
export FAKEGPU_CLUSTER_DIR=$repo/.cache/bench/cluster
export FAKEGPU_ETCD_PORT=22379 FAKEGPU_ETCD_PEER_PORT=22380 FAKEGPU_APISERVER_PORT=26443
export FAKEGPU_KCM_PORT=30257 FAKEGPU_SCHEDULER_PORT=30259 FAKEGPU_KWOK_PORT=30247
export FAKEGPU_HTTP_ADDR=127.0.0.1:30080
