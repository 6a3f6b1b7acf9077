#!/usr/bin/python3
"""Extract the kernel's own BTF blob (what the guest exposes as /sys/kernel/btf/vmlinux)
from an uncompressed arm64 kernel Image.

Why: Debian ships arm64 kernels as a raw Image (no ELF sections), but the .BTF
section is loaded data, so its bytes are inside the Image. With it, bpftool can
write an arm64 vmlinux.h (struct thread_struct has uw.tp_value there, not fsbase)
without booting a guest or downloading the huge -dbg package.

Usage: extract_btf.py IMAGE OUT.btf
"""
import struct
import sys

BTF_MAGIC_V1_HDR24 = b"\x9f\xeb\x01\x00\x18\x00\x00\x00"  # magic 0xeB9F LE, version 1, flags 0, hdr_len 24


def find_vmlinux_btf(image: bytes) -> bytes:
    best = b""
    start = 0
    while (pos := image.find(BTF_MAGIC_V1_HDR24, start)) >= 0:
        start = pos + 1
        type_off, type_len, str_off, str_len = struct.unpack_from("<4I", image, pos + 8)
        total = 24 + max(type_off + type_len, str_off + str_len)
        # A real header has types first, strings right after, and fits in the Image.
        if type_off != 0 or str_off != type_len or pos + total > len(image):
            continue
        # The string section starts with the empty string.
        if image[pos + 24 + str_off] != 0:
            continue
        if total > len(best):
            best = image[pos:pos + total]
    return best


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1], "rb") as f:
        image = f.read()
    btf = find_vmlinux_btf(image)
    if len(btf) < 1 << 20:  # vmlinux BTF is several MB; anything small is a false match
        print(f"extract_btf: no vmlinux BTF found in {sys.argv[1]}", file=sys.stderr)
        return 1
    with open(sys.argv[2], "wb") as f:
        f.write(btf)
    print(f"extract_btf: {len(btf)} bytes of BTF from {sys.argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
