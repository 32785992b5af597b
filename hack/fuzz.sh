#!/usr/bin/env bash
# Fuzzes what fakegpu parses from text others write (fuzz/fuzz_targets/: cargo fuzz, libFuzzer,
# AddressSanitizer, on the nightly toolchain).
#
#   hack/fuzz.sh                    # every target, FAKEGPU_FUZZ_SECONDS (default 30) each: CI's run
#   hack/fuzz.sh TARGET [SECONDS]   # one target, as long as asked (default 600): by hand
#   hack/fuzz.sh --list             # the targets
#
# Each run starts from the target's seeds (fuzz/seeds/TARGET, taken from the tests) and grows a
# corpus of its own under .cache/fuzz/corpus/TARGET, kept between runs on this machine. A crash,
# a failed assertion, an out-of-bounds access or a leak stops the run and fails it, leaving the
# input under .cache/fuzz/artifacts/TARGET: make it a regression test (docs/src/development/fuzzing.md).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
# shellcheck source=hack/lib/prerequisites.sh
source "$repo/hack/lib/prerequisites.sh"

prerequisites_fuzz || exit 1
# Built under target/ with the rest (CI caches it there).
fuzz() { cargo +nightly fuzz "$1" --fuzz-dir fuzz "${@:2}"; }
build=(--target-dir "$repo/target/fuzz")
targets=$(fuzz list)
if [[ ${1:-} == --list ]]; then
  echo "$targets"
  exit 0
fi
if [[ $# -gt 0 ]]; then
  grep -qx "$1" <<<"$targets" || { echo "no fuzz target $1; there are: $(echo $targets)" >&2; exit 2; }
  selected=$1
  seconds=${2:-600}
else
  selected=$targets
  seconds=${FAKEGPU_FUZZ_SECONDS:-30}
fi

# One build for all targets (sanitizer, debug assertions on, optimised).
fuzz build "${build[@]}" >&2

status=0
for target in $selected; do
  corpus=$repo/.cache/fuzz/corpus/$target
  artifacts=$repo/.cache/fuzz/artifacts/$target
  mkdir -p "$corpus" "$artifacts"
  log=$repo/.cache/fuzz/$target.log
  echo "==> fuzzing $target for ${seconds}s (seeds: fuzz/seeds/$target, corpus: $corpus, log: $log)"
  # -rss_limit_mb: a leak or a runaway allocation fails the run instead of swapping.
  if fuzz run "${build[@]}" "$target" "$corpus" "fuzz/seeds/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1; then
    grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" | tr '\n' ' '
    echo
  else
    tail -n 80 "$log" >&2
    echo "fuzz target $target FAILED; its input is under $artifacts" >&2
    status=1
  fi
done
exit "$status"
