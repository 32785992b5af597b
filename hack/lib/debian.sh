# shellcheck shell=bash
# Fetches one package from Debian's archive and unpacks it, for tests that run programs or
# libraries of other distributions' releases (NVIDIA's nvidia-smi, an older glibc). Uses the
# package index, so the version wanted is the only thing a caller pins; the .deb is checked
# against the index's SHA256.
#
# FAKEGPU_DEBIAN_MIRROR overrides the mirror (default http://deb.debian.org/debian).

# Unpacks <package>'s newest build whose version starts with <version> from <suite>'s
# <component> into <dir> (dpkg-deb -x: files only, no maintainer scripts).
debian_unpack() { # <suite> <component> <package> <version> <dir>
  local suite=$1 component=$2 package=$3 version=$4 dir=$5
  local mirror=${FAKEGPU_DEBIAN_MIRROR:-http://deb.debian.org/debian} scratch entry file sum
  scratch=$(mktemp -d)
  curl -fsSL --retry 3 --retry-delay 2 "$mirror/dists/$suite/$component/binary-amd64/Packages.xz" |
    xz -d >"$scratch/Packages" || { rm -rf "$scratch"; return 1; }
  entry=$(awk -v want="$package" -v prefix="$version" '
    /^Package: / { pkg = $2 }
    /^Version: / { ver = $2 }
    /^Filename: / { file = $2 }
    /^SHA256: /  { sum = $2 }
    /^$/ { if (pkg == want && index(ver, prefix) == 1) print file, sum; pkg = "" }
    END  { if (pkg == want && index(ver, prefix) == 1) print file, sum }
  ' "$scratch/Packages" | tail -n1)
  if [[ -z $entry ]]; then
    printf 'error: %s %s has no %s %s\n' "$suite" "$component" "$package" "$version" >&2
    rm -rf "$scratch"
    return 1
  fi
  read -r file sum <<<"$entry"
  curl -fsSL --retry 3 --retry-delay 2 "$mirror/$file" -o "$scratch/package.deb" &&
    echo "$sum  $scratch/package.deb" | sha256sum --check --quiet - &&
    mkdir -p "$dir" && dpkg-deb -x "$scratch/package.deb" "$dir"
  local status=$?
  rm -rf "$scratch"
  return "$status"
}
