#!/usr/bin/env bash
# A container registry on loopback, for pushing the image archives as a user pushes them to
# their registry and letting the real node pull them from there (hack/test.sh): Debian's
# docker-registry (CNCF distribution), plain HTTP, its storage in the cluster's state directory.
#
#   hack/registry.sh up     start it on 127.0.0.1:$FAKEGPU_REGISTRY_PORT (default 15000) and
#                           print its address
#   hack/registry.sh down   stop it and remove what was pushed
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${FAKEGPU_CLUSTER_DIR:-$repo/.cache/cluster}
address=127.0.0.1:${FAKEGPU_REGISTRY_PORT:-15000}
# shellcheck source=hack/lib/proc.sh
source "$repo/hack/lib/proc.sh"
proc_run_dir=$dir/run
proc_log_dir=$dir/logs

log() { printf '[registry] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

up() {
  command -v docker-registry >/dev/null || die "docker-registry not found: apt-get install docker-registry"
  if ! proc_running registry; then
    mkdir -p "$dir/registry"
    cat >"$dir/registry/config.yml" <<EOF
version: 0.1
log: {level: warn}
storage:
  filesystem: {rootdirectory: $dir/registry/storage}
  delete: {enabled: true}
http: {addr: $address}
EOF
    proc_start registry docker-registry serve "$dir/registry/config.yml"
    proc_wait_for registry 30 curl -sf "http://$address/v2/"
    log "running on $address (storage $dir/registry/storage)"
  fi
  echo "$address"
}

down() {
  proc_stop registry
  rm -rf "$dir/registry"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
