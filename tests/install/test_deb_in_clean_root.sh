#!/usr/bin/env bash
# The Debian packages on a clean Debian 12 root: nothing they need may come from
# the build tree or this machine's installed packages.
#
#   bash tests/install/test_deb_in_clean_root.sh [PACKAGES_DIR]   (root; default build/packages,
#                                                                  made by scripts/package.sh)
#
# mmdebstrap makes a minimal bookworm root (variant apt) from this machine's
# package sources; inside it, with /proc, /sys, /sys/fs/bpf and /dev mounted
# (in a mount namespace of its own, so nothing outlives the test), apt-get
# installs ./tracecorr_<version>_amd64.deb and ./python3-tracecorr_<version>_amd64.deb,
# then the main job runs from the installed files only:
#   tracecorr --version, doctor (BPF loads), list, inspect of the bundled
#   Elastic reference (held, no findings), a full conform of that reference
#   (exit 0, JUnit/HTML/JSON reports), one mutant of every protocol judged by
#   its own rule (exit 1: the installed, stripped fixtures are still caught),
#   `python3 -m pytest --help` listing the plugin's options, and dpkg -L
#   naming nothing outside the installed tree.
# Exits 0 only if every step did. Takes a few minutes (the root's packages are downloaded).
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
packages=$(cd "${1:-$repo/build/packages}" && pwd)
version=$(sed -n 's/^project(tracecorr VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
arch=$(dpkg --print-architecture)
debs=("$packages/tracecorr_${version}_${arch}.deb" "$packages/python3-tracecorr_${version}_${arch}.deb")
for deb in "${debs[@]}"; do
  [ -f "$deb" ] || { echo "clean-root: $deb missing (bash scripts/package.sh)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "clean-root: needs root (mmdebstrap, chroot, mounts)" >&2; exit 1; }
command -v mmdebstrap >/dev/null || { echo "clean-root: apt-get install mmdebstrap" >&2; exit 1; }

root=$(mktemp -d /tmp/tracecorr-clean-root.XXXXXX)
trap 'rm -rf --one-file-system "$root"' EXIT
sources=/etc/apt/sources.list.d/debian.sources
[ -f "$sources" ] || sources=/etc/apt/sources.list
echo "clean-root: mmdebstrap bookworm (variant apt) into $root"
started=$(date +%s)
mmdebstrap --quiet --mode=root --variant=apt \
  --aptopt='Acquire::Check-Valid-Until "false"' --aptopt='Acquire::Check-Date "false"' \
  bookworm "$root" "$sources"
echo "clean-root: root made in $(($(date +%s) - started)) s"
mkdir -p "$root/tmp/debs"
cp "${debs[@]}" "$root/tmp/debs/"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$repo/tests/install/inside_clean_root.sh" "$root/tmp/inside.sh"

unshare --mount --propagation private -- bash -euo pipefail -c '
  root=$1
  mount -t proc proc "$root/proc"
  mount -t sysfs sysfs "$root/sys"
  mount -t bpf bpf "$root/sys/fs/bpf"
  mount --rbind /dev "$root/dev"
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    bash /tmp/inside.sh "$2" "$3"
' _ "$root" "$version" "$arch"
echo "clean-root: passed in $(($(date +%s) - started)) s"
