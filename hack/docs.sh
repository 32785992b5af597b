#!/usr/bin/env bash
# The user's book: docs/ (mdBook, docs/src/SUMMARY.md its contents). Builds it into docs/book
# and fails when a link or anchor in the book, or a relative link of README.md, leads nowhere
# (hack/docs/check_links.py). mdbook comes from crates.io, built once per machine
# (hack/lib/prerequisites.sh).
#
#   hack/docs.sh          build and check
#   mdbook serve docs     read it while writing (with the mdbook this script built on PATH)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib/prerequisites.sh
source "$repo/hack/lib/prerequisites.sh"
command -v mdbook >/dev/null || prerequisites_mdbook
rm -rf "$repo/docs/book"
if ! out=$(mdbook build "$repo/docs" 2>&1); then
  echo "$out" >&2
  exit 1
fi
# Warnings (a chapter that does not parse, say) are shown; INFO lines are not.
grep -v ' INFO ' <<<"$out" >&2 || true
python3 "$repo/hack/docs/check_links.py" "$repo/docs/book" "$repo"
