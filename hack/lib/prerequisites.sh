# shellcheck shell=bash
# What the demo, the test suite and CI need from the machine, in one list, checked at the start
# of hack/demo.sh and hack/test.sh (and so of .ci/run), never twenty minutes in. Where it can
# (root on Debian or Ubuntu) it installs what is missing: Debian's packages, rustup's musl target
# and components, Go from the Go module proxy, mdbook from crates.io. Where it cannot, it says
# once what is missing, the command that installs it, and what the caller will skip or why it
# stops.
#
#   prerequisites demo   the demo: the KWOK half needs the core list; the real-node half (images,
#                        a kubelet node) its own list, and is skipped, saying so, without it
#   prerequisites test   the test suite: everything (the real-node list only without
#                        FAKEGPU_SKIP_REAL_NODE=1); anything missing stops it at the start
#
# Sets FAKEGPU_REAL_NODE_SKIP_WHY (empty when the real node can run) and exports PATH or
# GOTOOLCHAIN for the Go and mdbook it provides.

# Go: hack/ pins Kubernetes 1.37, whose go.mod asks for go >= 1.26.0. An older Go (>= 1.21)
# fetches the toolchain from the module proxy itself; without any Go, the toolchain module is
# fetched from the proxy by hand.
prerequisites_go_wanted=1.26.8
# The book's builder (hack/docs.sh), from crates.io.
prerequisites_mdbook_version=0.5.4
# The fuzzers' driver (hack/fuzz.sh), from crates.io.
prerequisites_cargo_fuzz_version=0.13.2

# Debian packages, with who needs them. Core: the control plane and the KWOK demo.
prerequisites_core_packages=(
  "openssl:the cluster's certificates (hack/cluster.sh)"
  "curl:readiness probes and downloads"
  "ca-certificates:downloads over HTTPS"
)
# The images (hack/images.sh), with rustup's musl target: the demo's real-node half runs them,
# the test suite builds them in every case.
prerequisites_image_packages=(
  "musl-tools:the images' static binaries (ring's C code)"
  "python3-venv:cargo-zigbuild and zig from PyPI, which link the images' NVML library (hack/lib/zigbuild.sh)"
  "binutils:objdump, which checks the NVML library's glibc symbol versions"
)
# The real node (hack/node.sh).
prerequisites_real_node_packages=(
  "runc:the real node's container runtime"
  "containernetworking-plugins:the real node's pod network (CNI bridge)"
  "nftables:the real node's kube-proxy (nftables mode) and the host snapshot hack/node.sh compares"
  "iptables:the kubelet's and kube-proxy's iptables canaries, and the host snapshot"
  "busybox-static:a shell for the real node's test and demo pods"
)
# The rest of the test suite.
prerequisites_suite_packages=(
  "prometheus:the exporter's e2e test scrapes and queries through a real Prometheus"
  "xz-utils:Debian's package index, for NVIDIA's nvidia-smi (hack/nvidia-smi.sh)"
  "skopeo:a second reader of the image archives, and the push to a registry"
  "docker-registry:the registry on loopback the images are pushed to (hack/registry.sh)"
  "python3-venv:NVML's Python users under test (hack/nvml-python.sh)"
  "python3-yaml:Kueue's webhook manifests, pointed at loopback (hack/kueue.sh)"
  "lua5.1:Argo CD's health check for pools (deploy/argo-cd), run with the Lua Argo CD embeds"
)

prerequisites_log() { printf '[prerequisites] %s\n' "$*" >&2; }

prerequisites_have_package() {
  dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}

# Whether this machine lets us install: root, with apt-get.
prerequisites_can_install() {
  [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null && command -v dpkg-query >/dev/null
}

prerequisites_go_new_enough() {
  local v
  v=$(go env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  [[ $(printf '%s\n' 1.26.0 "$v" | sort -V | head -n1) == 1.26.0 ]]
}

# Go >= 1.26 on PATH, fetched from the module proxy when there is none (no root needed).
prerequisites_go() {
  if command -v go >/dev/null; then
    prerequisites_go_new_enough || export GOTOOLCHAIN=go$prerequisites_go_wanted
    return 0
  fi
  local proxy dest module
  proxy=$(printf '%s' "${GOPROXY:-https://proxy.golang.org}" | cut -d, -f1)
  dest=$HOME/.cache/fakegpu-go
  module=golang.org/toolchain@v0.0.1-go$prerequisites_go_wanted.linux-amd64
  if [[ ! -x $dest/$module/bin/go ]]; then
    command -v unzip >/dev/null || return 1
    prerequisites_log "fetching Go $prerequisites_go_wanted from the Go module proxy (about 70 MB)"
    mkdir -p "$dest"
    curl -fsSL "$proxy/golang.org/toolchain/@v/v0.0.1-go$prerequisites_go_wanted.linux-amd64.zip" \
      -o "$dest/go.zip" || return 1
    unzip -q -o "$dest/go.zip" -d "$dest"
    rm -f "$dest/go.zip"
  fi
  export PATH=$dest/$module/bin:$PATH
}

# Tools built from crates.io, once per machine: the user's cache, like Go's (a fresh checkout,
# CI's, does not build them again).
prerequisites_tools=${XDG_CACHE_HOME:-$HOME/.cache}/fakegpu-tools

# Puts <crate>@<version>'s binaries on PATH, building them from crates.io the first time
# (<why>: what they are for, said while they build); further arguments go to cargo install.
prerequisites_cargo_tool() { # <crate> <version> <why> [cargo install args...]
  local crate=$1 version=$2 why=$3
  shift 3
  local root=$prerequisites_tools/$crate-$version
  if [[ ! -x $root/bin/$crate ]]; then
    prerequisites_log "building $crate $version from crates.io for $why (the first time: 2 to 5 minutes)"
    cargo install --quiet --locked --root "$root" "$@" "$crate@$version" >&2 || return 1
  fi
  export PATH=$root/bin:$PATH
}

# mdbook on PATH, built from crates.io the first time.
prerequisites_mdbook() {
  prerequisites_cargo_tool mdbook "$prerequisites_mdbook_version" "the book" \
    --no-default-features --features search
}

# The nightly toolchain (cargo fuzz builds with its sanitizer flags) and cargo-fuzz, for
# hack/fuzz.sh.
prerequisites_fuzz() {
  local _
  for _ in 1 2 3; do
    rustup run nightly rustc --version >/dev/null 2>&1 && break
    prerequisites_log "installing Rust's nightly toolchain (rustup) for the fuzzers"
    rustup toolchain install nightly --profile minimal >&2 || sleep 5
  done
  rustup run nightly rustc --version >/dev/null 2>&1 || {
    prerequisites_log "the fuzzers need Rust's nightly toolchain: rustup toolchain install nightly"
    return 1
  }
  prerequisites_cargo_tool cargo-fuzz "$prerequisites_cargo_fuzz_version" "the fuzzers"
}

# Adds rustup's <target> (retrying: rustup's server can answer late).
prerequisites_rust_target() {
  local _
  for _ in 1 2 3; do
    rustup target list --installed 2>/dev/null | grep -qx "$1" && return 0
    rustup target add "$1" >&2 || sleep 5
  done
  rustup target list --installed 2>/dev/null | grep -qx "$1"
}

# prerequisites <demo|test>: see the top of this file.
prerequisites() {
  local purpose=$1 repo
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  local want_real_node=1 want_suite=0
  [[ $purpose == test ]] && want_suite=1
  [[ $purpose == test && ${FAKEGPU_SKIP_REAL_NODE:-} == 1 ]] && want_real_node=0
  local -a entries=("${prerequisites_core_packages[@]}")
  ((want_suite)) && entries+=("${prerequisites_suite_packages[@]}" "${prerequisites_image_packages[@]}")
  # Linux and root are the real node's own conditions; no package makes up for them.
  local real_node_why=
  if ((want_real_node)); then
    if [[ $(uname -s) != Linux ]]; then
      real_node_why="not Linux"
    elif [[ $(id -u) != 0 ]]; then
      real_node_why="not root (the kubelet and containerd need root)"
    else
      entries+=("${prerequisites_real_node_packages[@]}" "${prerequisites_image_packages[@]}")
    fi
  fi

  # What is missing, each package once, with why.
  local -a missing=() reasons=()
  local entry package
  for entry in "${entries[@]}"; do
    package=${entry%%:*}
    [[ " ${missing[*]} " == *" $package "* ]] && continue
    prerequisites_have_package "$package" && continue
    missing+=("$package")
    reasons+=("$package: ${entry#*:}")
  done

  local -a unmet=()
  if ((${#missing[@]})); then
    if prerequisites_can_install; then
      prerequisites_log "installing Debian's ${missing[*]} (apt-get: about a minute)"
      local reason
      for reason in "${reasons[@]}"; do prerequisites_log "  $reason"; done
      if apt-get update -qq >&2 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; then
        # Where an init system runs, the package starts its own registry on all interfaces: the
        # tests start theirs on loopback only.
        if [[ " ${missing[*]} " == *" docker-registry "* && -d /run/systemd/system ]]; then
          systemctl disable --now docker-registry >/dev/null 2>&1 || true
        fi
      else
        unmet+=("${reasons[@]}")
      fi
    else
      unmet+=("${reasons[@]}")
    fi
  fi

  prerequisites_go || unmet+=("go >= 1.26: install Go, or unzip (apt-get install unzip) so that it can be fetched")
  if ! command -v cargo >/dev/null || ! command -v rustup >/dev/null; then
    unmet+=("cargo and rustup: install Rust with rustup (https://rustup.rs), edition 2024")
  else
    if ((want_suite)); then
      cargo clippy --version >/dev/null 2>&1 && cargo fmt --version >/dev/null 2>&1 ||
        rustup component add clippy rustfmt >&2 ||
        unmet+=("clippy and rustfmt: rustup component add clippy rustfmt")
      prerequisites_mdbook ||
        unmet+=("mdbook $prerequisites_mdbook_version: cargo install --locked mdbook@$prerequisites_mdbook_version")
    fi
    if ((want_suite)) || [[ $want_real_node == 1 && -z $real_node_why ]]; then
      prerequisites_rust_target x86_64-unknown-linux-musl ||
        unmet+=("rustup's musl target (the images): rustup target add x86_64-unknown-linux-musl")
    fi
  fi

  # Each unmet need belongs to the real node's list or to what the caller cannot do without.
  local -a fatal=() real_node_unmet=() need
  for need in "${unmet[@]}"; do
    package=${need%%:*}
    if [[ $purpose == demo ]] &&
      [[ " ${prerequisites_real_node_packages[*]%%:*} ${prerequisites_image_packages[*]%%:*} " == *" $package "* ||
        $need == *musl\ target* ]]; then
      real_node_unmet+=("$need")
    else
      fatal+=("$need")
    fi
  done
  if ((${#real_node_unmet[@]})); then
    real_node_why="missing ${real_node_unmet[*]%%:*}"
  fi
  if [[ -n $real_node_why && $want_real_node == 1 ]]; then
    if [[ $purpose == demo ]]; then
      prerequisites_log "the demo will skip its real-node half (images, a kubelet node, nvidia-smi in a GPU container): $real_node_why"
      for need in "${real_node_unmet[@]}"; do prerequisites_log "  $need"; done
      local hint
      hint=$(prerequisites_install_hint "${real_node_unmet[@]}")
      [[ -n $hint ]] && prerequisites_log "  as root: $hint"
    else
      fatal+=("the real node: $real_node_why (FAKEGPU_SKIP_REAL_NODE=1 skips that phase)")
    fi
  fi
  if ((${#fatal[@]})); then
    prerequisites_log "this machine lacks what the ${purpose} needs:"
    for need in "${fatal[@]}"; do prerequisites_log "  $need"; done
    local hint
    hint=$(prerequisites_install_hint "${fatal[@]}")
    [[ -n $hint ]] && prerequisites_log "as root on Debian or Ubuntu: $hint"
    return 1
  fi
  FAKEGPU_REAL_NODE_SKIP_WHY=$real_node_why
  if ((want_real_node)) && [[ -z $real_node_why ]]; then
    prerequisites_log "everything the ${purpose} needs is here, the real node's part included"
  else
    prerequisites_log "everything the ${purpose} needs without a real node is here"
  fi
}

# The apt-get line for the Debian packages among <needs> ("package: why" each).
prerequisites_install_hint() {
  local -a packages=() need
  for need in "$@"; do
    [[ $need == *:* && ${need%%:*} != *' '* ]] && packages+=("${need%%:*}")
  done
  if ((${#packages[@]})); then echo "apt-get update && apt-get install ${packages[*]}"; fi
}
