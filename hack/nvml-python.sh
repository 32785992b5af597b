#!/usr/bin/env bash
# NVML's Python users (NVIDIA's nvidia-ml-py, gpustat, nvitop; pinned in
# hack/nvml-python/requirements.txt, from PyPI into a virtualenv under target/) against the
# library FAKEGPU_NVML_LIBRARY names, and NVIDIA's CUDA runtime (the same way) against the
# libcuda.so built beside it: hack/nvml-python/test_consumers.py.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
requirements=$repo/hack/nvml-python/requirements.txt
env=$repo/target/hack-bin/nvml-python-$(sha256sum "$requirements" | cut -c1-12)
if [[ ! -x $env/bin/python ]]; then
  printf '[nvml-python] installing %s from PyPI\n' "$(grep -v '^#' "$requirements" | tr '\n' ' ')" >&2
  rm -rf "$env"
  python3 -m venv "$env" >&2
  "$env/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$requirements" >&2
fi
[[ -n ${FAKEGPU_NVML_LIBRARY:-} ]] || { echo "FAKEGPU_NVML_LIBRARY must name the built library" >&2; exit 1; }
cd "$repo/hack/nvml-python"
# No __pycache__ left in the checkout.
export PYTHONDONTWRITEBYTECODE=1
"$env/bin/python" -m unittest -v test_consumers
