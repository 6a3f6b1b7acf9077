#!/usr/bin/env bash
# Fetches and unpacks everything the arm64 cross build and the arm64 full-system
# test need, from Debian's own archive only:
#   - host tools (cross compilers, qemu-system-aarch64, cpio) if missing;
#   - arm64 as a foreign dpkg architecture, so apt can see arm64 packages;
#   - the sysroot packages (cmake/arm64/sysroot-packages.txt) -> build-arm64-sysroot/
#   - the pinned guest kernel + busybox (tests/arm64/kernel.lock) -> build-arm64-guest/
#     (raw Image, its config, busybox, the kernel's BTF and an arm64 vmlinux.h).
# .deb files are cached in ${TRACECORR_ARM64_CACHE:-~/.cache/tracecorr/arm64}, never in git.
# Idempotent: a second run downloads and extracts nothing. Run as root on Debian 12.
#
# Environment: TRACECORR_ARM64_CACHE, TRACECORR_ARM64_SYSROOT, TRACECORR_ARM64_GUEST
# override the three locations.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cache=${TRACECORR_ARM64_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tracecorr/arm64}
sysroot=${TRACECORR_ARM64_SYSROOT:-$repo/build-arm64-sysroot}
guest=${TRACECORR_ARM64_GUEST:-$repo/build-arm64-guest}
debs=$cache/debs

log() { echo "prepare-arm64: $*"; }
die() { echo "prepare-arm64: error: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "run as root (needs dpkg --add-architecture and apt-get)"
export DEBIAN_FRONTEND=noninteractive

apt_updated=0
apt_update_once() {
  if [ "$apt_updated" -eq 0 ]; then
    log "apt-get update"
    apt-get update -qq
    apt_updated=1
  fi
}

# --- host tools --------------------------------------------------------------
host_packages=(gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-system-arm cpio gzip
               dpkg-dev python3 bpftool cmake ninja-build pkg-config file protobuf-compiler)
missing=()
for p in "${host_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt_update_once
  log "installing host tools: ${missing[*]}"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- arm64 package index ------------------------------------------------------
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  log "dpkg --add-architecture arm64"
  dpkg --add-architecture arm64
  apt_updated=0  # the index has no arm64 lists yet, whatever ran before
fi
# The arm64 lists exist once an update ran after the architecture was added.
if ! compgen -G "/var/lib/apt/lists/*_binary-arm64_Packages*" >/dev/null; then
  apt_update_once
fi

# Reads a package list: drops comments and blank lines.
read_list() { sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$1"; }

# Downloads the packages named on stdin ("PKG[:ARCH]" or "PKG[:ARCH] VERSION"; no
# version: the apt candidate) into the cache unless already there, and prints the
# cached .deb paths. One apt call resolves them all: apt is slow to start.
fetch_all() {
  local specs=() spec version uris missing=() line file
  while read -r spec version; do specs+=("$spec${version:+=$version}"); done
  if ! uris=$(apt-get download --print-uris -qq "${specs[@]}"); then
    die "apt cannot resolve ${specs[*]} (a pinned version may have left the archive: update the lock file)"
  fi
  while read -r line; do
    file=$(awk '{print $2}' <<<"$line")
    echo "$debs/$file"
    [ -s "$debs/$file" ] || missing+=("$file")
  done <<<"$uris"
  if ((${#missing[@]})); then
    log "downloading ${missing[*]}" >&2
    # Root downloads into a root-owned cache: skip apt's _apt sandbox (it only warns).
    (cd "$debs" && apt-get download -qq -o APT::Sandbox::User=root "${specs[@]}" >/dev/null)
    for file in "${missing[@]}"; do [ -s "$debs/$file" ] || die "apt-get download did not produce $file"; done
  fi
}

# Extracts DEBS... into DIR, from scratch, unless DIR/.tracecorr-debs already lists them.
extract_all() {
  local dir=$1 wanted deb; shift
  wanted=$(printf '%s\n' "$@" | xargs -n1 basename | sort)
  if [ -f "$dir/.tracecorr-debs" ] && [ "$(cat "$dir/.tracecorr-debs")" = "$wanted" ]; then
    return 1  # up to date
  fi
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  for deb in "$@"; do dpkg-deb -x "$deb" "$dir.tmp"; done
  echo "$wanted" >"$dir.tmp/.tracecorr-debs"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
  return 0
}

mkdir -p "$debs"

# --- sysroot --------------------------------------------------------------------
read_list "$repo/cmake/arm64/sysroot-packages.txt" | fetch_all >"$cache/sysroot-debs.txt"
mapfile -t sysroot_debs <"$cache/sysroot-debs.txt"
((${#sysroot_debs[@]})) || die "no sysroot packages resolved"
if extract_all "$sysroot" "${sysroot_debs[@]}"; then
  # Debian's .so symlinks are absolute (/lib/...): point them (relatively) into the sysroot so
  # the cross linker never picks a host library through them.
  find "$sysroot" -type l -lname '/*' | while read -r link; do
    ln -sfnr "$sysroot$(readlink "$link")" "$link"
  done
  log "sysroot ready: $sysroot"
else
  log "sysroot up to date: $sysroot"
fi

# --- guest: kernel + busybox ----------------------------------------------------
read_list "$repo/tests/arm64/kernel.lock" | fetch_all >"$cache/guest-debs.txt"
mapfile -t guest_debs <"$cache/guest-debs.txt"
((${#guest_debs[@]})) || die "no guest packages resolved"
unpacked=$guest/unpacked
if extract_all "$unpacked" "${guest_debs[@]}" || [ ! -s "$guest/Image" ] || [ ! -s "$guest/vmlinux.h" ]; then
  vmlinuz=$(find "$unpacked/boot" -name 'vmlinuz-*' | head -n1)
  [ -n "$vmlinuz" ] || die "no /boot/vmlinuz-* in the kernel package"
  # qemu -kernel wants the raw Image; Debian's arm64 vmlinuz is raw or gzip'ed.
  if gzip -t "$vmlinuz" 2>/dev/null; then
    gzip -dc "$vmlinuz" >"$guest/Image.tmp"
  else
    cp "$vmlinuz" "$guest/Image.tmp"
  fi
  mv "$guest/Image.tmp" "$guest/Image"
  cp "$(find "$unpacked/boot" -name 'config-*' | head -n1)" "$guest/config"
  for option in CONFIG_BPF_SYSCALL CONFIG_DEBUG_INFO_BTF CONFIG_PERF_EVENTS CONFIG_SERIAL_AMBA_PL011_CONSOLE CONFIG_BLK_DEV_INITRD; do
    grep -qx "$option=y" "$guest/config" || die "guest kernel lacks $option=y (see tests/arm64/kernel.lock)"
  done
  cp "$unpacked/bin/busybox" "$guest/busybox"
  # The kernel's BTF, as the guest will see it, and the C view of it for BPF CO-RE
  # code that must name arm64 fields (task->thread.uw.tp_value).
  /usr/bin/python3 "$repo/scripts/arm64/extract_btf.py" "$guest/Image" "$guest/vmlinux.btf"
  bpftool btf dump file "$guest/vmlinux.btf" format c >"$guest/vmlinux.h.tmp"
  mv "$guest/vmlinux.h.tmp" "$guest/vmlinux.h"
  log "guest ready: $guest (Image, config, busybox, vmlinux.btf, vmlinux.h)"
else
  log "guest up to date: $guest"
fi
