# shellcheck shell=bash
# The NVML library is loaded into containers' processes, whose images carry their own glibc:
# CUDA's Ubuntu 20.04 images have 2.31, UBI 8 2.28, CentOS 7 2.17. A library linked against
# this machine's glibc asks for symbol versions up to 2.34 and fails to load in all of them
# ("version `GLIBC_2.34' not found"), where NVIDIA's own loads. cargo-zigbuild links it with zig
# against glibc 2.17's symbol versions instead, the oldest NVIDIA's drivers still support, and
# with zig's static unwinder, so it needs no libgcc_s.so.1 either. Both come from PyPI (the
# cargo-zigbuild wheel depends on the ziglang wheel), into a virtualenv under target/.

zigbuild_version=0.24.1
ziglang_version=0.17.1
# The glibc whose symbol versions the library may ask for, and the cargo target that says so.
nvml_glibc=2.17
nvml_zig_target=x86_64-unknown-linux-gnu.$nvml_glibc

# The built library in checkout <repo> (cargo-zigbuild's target folder drops the glibc suffix).
nvml_library_in() { # <repo>
  echo "$1/target/x86_64-unknown-linux-gnu/release/libnvidia_ml.so"
}

# The CUDA driver stub of driver roots (crate cuda/), built the same way and loaded the same way.
cuda_library_in() { # <repo>
  echo "$1/target/x86_64-unknown-linux-gnu/release/libcuda.so"
}

# Prints the folder whose bin/ holds cargo-zigbuild and the Python that runs zig, making it
# on first use. <repo> is the checkout.
zigbuild_env() { # <repo>
  local env=$1/target/hack-bin/zigbuild-$zigbuild_version
  if [[ ! -x $env/bin/cargo-zigbuild ]]; then
    printf '[zigbuild] installing cargo-zigbuild %s and zig %s from PyPI\n' \
      "$zigbuild_version" "$ziglang_version" >&2
    rm -rf "$env"
    python3 -m venv "$env" >&2
    "$env/bin/pip" install --quiet --disable-pip-version-check \
      "cargo-zigbuild==$zigbuild_version" "ziglang==$ziglang_version" >&2
  fi
  echo "$env"
}

# The newest glibc symbol version <library> asks for (GLIBC_2.17 for a library that loads
# with glibc 2.17 and later).
glibc_needed() { # <library>
  objdump -T "$1" | grep -oE 'GLIBC_[0-9]+(\.[0-9]+)+' | sort -uV | tail -n1
}
