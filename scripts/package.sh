#!/usr/bin/env bash
# Builds tracecorr's Debian packages and its Python wheel from one CMake build
# (Debian 12, as root for the packages it installs), and checks them.
#
#   bash scripts/package.sh           amd64 (this machine): build/packages/
#       tracecorr_<version>_amd64.deb, python3-tracecorr_<version>_amd64.deb,
#       tracecorr-dbgsym_<version>_amd64.deb, tracecorr-<version>-cp3X-cp3X-linux_x86_64.whl
#   bash scripts/package.sh --arm64   besides, from the arm64 cross build
#       (scripts/arm64/build-tracecorr.sh, Release as it builds): build-arm64/packages/
#       tracecorr_<version>_arm64.deb and tracecorr-dbgsym_<version>_arm64.deb (its symbol
#       tables: Release has no DWARF); no Python module (it is not cross-built)
#
# The wheel holds the module the package holds (stripped, from the same build):
# nothing is compiled twice. The checks: no path `dpkg -c` lists is of the
# build tree, no ELF file has a RUNPATH but $ORIGIN, the CLI is at most 20 MB,
# the changelog's version is project()'s; each package's Depends are printed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
arm64=0
case "${1:-}" in
  "") ;;
  --arm64) arm64=1 ;;
  *) echo "usage: $0 [--arm64]" >&2; exit 2 ;;
esac

bash scripts/setup.sh --package
version=$(sed -n 's/^project(tracecorr VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
changelog_version=$(dpkg-parsechangelog -l packaging/changelog -S Version)
if [ "$changelog_version" != "$version" ]; then
  echo "package: packaging/changelog's newest entry is $changelog_version, project() says $version" >&2
  exit 1
fi

rm -rf build/packages
cmake --build build --target package

# The wheel, from the stripped module the package holds (setup.py: TRACECORR_PREBUILT_EXTENSION).
suffix=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
module=build/dist/python/_tracecorr$suffix
TRACECORR_PREBUILT_EXTENSION="$repo/$module" /usr/bin/python3 -m pip wheel --no-build-isolation --no-deps \
  --quiet --wheel-dir build/packages . 2>&1 | grep -v "^WARNING: Running pip as the 'root' user" || true
ls build/packages/tracecorr-"$version"-*.whl >/dev/null

check_deb() {  # check_deb <file.deb> <build tree>
  local deb=$1 tree=$2 root f runpath
  if dpkg-deb -c "$deb" | grep -F -e "$repo" -e "$tree"; then
    echo "package: $deb lists a path of the build tree" >&2
    exit 1
  fi
  root=$(mktemp -d)
  dpkg-deb -x "$deb" "$root"
  # Every ELF file finds its libraries by the system's paths or next to itself, never in the tree.
  while IFS= read -r -d '' f; do
    [ "$(head -c 4 "$f" | tr -d '\0')" = $'\x7fELF' ] || continue
    runpath=$(readelf -d "$f" 2>/dev/null | sed -n 's/.*(R\(UN\)\{0,1\}PATH).*\[\(.*\)\]/\2/p')
    if [ -n "$runpath" ] && [ "$runpath" != '$ORIGIN' ]; then
      echo "package: $deb: ${f#"$root"} has RUNPATH $runpath" >&2
      exit 1
    fi
  done < <(find "$root" -type f -print0)
  rm -rf "$root"
}

report() {  # report <packages folder> <build tree>
  local dir=$1 tree=$2 deb
  for deb in "$dir"/*.deb; do
    check_deb "$deb" "$tree"
    echo "package: $(basename "$deb") $(du -h "$deb" | cut -f1)"
    dpkg-deb -f "$deb" Depends | sed 's/^/    Depends: /'
  done
}

cli_size() {  # cli_size <deb>: bytes of /usr/bin/tracecorr
  dpkg-deb -c "$1" | awk '$6 == "./usr/bin/tracecorr" { print $3 }'
}

check_man_pages() {
  dpkg-deb -c "$1" | grep -c '/usr/share/man/man1/tracecorr-conform\.1\.gz$' >/dev/null \
    || { echo "package: $1 has no man pages (help2man?)" >&2; exit 1; }
}

check_cli_size() {
  local deb=$1 bytes
  bytes=$(cli_size "$deb")
  if [ -z "$bytes" ] || [ "$bytes" -gt $((20 * 1024 * 1024)) ]; then
    echo "package: $deb: /usr/bin/tracecorr is ${bytes:-missing} bytes (at most 20 MB)" >&2
    exit 1
  fi
  echo "package: /usr/bin/tracecorr in $(basename "$deb"): $bytes bytes"
}

report build/packages "$repo/build"
check_cli_size build/packages/tracecorr_"$version"_amd64.deb
check_man_pages build/packages/tracecorr_"$version"_amd64.deb
ls build/packages/*.whl | sed 's/^/package: /'

if [ "$arm64" = 1 ]; then
  # The cross build packages its own CLI, BPF objects and arm64 fixtures (its
  # ALL builds them); the man pages come from this build (it cannot run its CLI).
  arm64_build=${TRACECORR_ARM64_BUILD:-$repo/build-arm64}
  # The CLI first, to compare the libraries it needs with the native one's: the
  # native package's Depends (dpkg-shlibdeps') hold for it only if they are the same.
  bash scripts/arm64/build-tracecorr.sh
  needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | grep -v '^ld-linux' | sort; }
  if ! diff <(needed build/bin/tracecorr) <(needed "$arm64_build/bin/tracecorr"); then
    echo "package: the arm64 CLI needs other libraries than the native one (above): its Depends are unknown" >&2
    exit 1
  fi
  depends=$(dpkg-deb -f build/packages/tracecorr_"$version"_amd64.deb Depends)
  TRACECORR_ARM64_TARGETS=package bash scripts/arm64/build-tracecorr.sh -DTRACECORR_MAN_DIR="$repo/build/dist/man" \
    -DTRACECORR_ARM64_FIXTURES=ON -DTRACECORR_DEB_DEPENDS="$depends"
  report "$arm64_build/packages" "$arm64_build"
  check_cli_size "$arm64_build/packages/tracecorr_${version}_arm64.deb"
  check_man_pages "$arm64_build/packages/tracecorr_${version}_arm64.deb"
fi
