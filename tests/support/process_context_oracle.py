"""An OpenTelemetry process context (OTEP 4719) read from outside, for the fixture tests.

Written from the OTEP's text and shares nothing with tracecorr's reader, so that a
misreading of the OTEP cannot hide in a definition both use: the mapping found by
name in /proc/PID/maps, the 32-byte header and the payload read through
/proc/PID/mem under the header's timestamp, and the payload decoded by a protobuf
wire-format walker written here (ProcessContext {resource = 1, attributes = 2}
with OTLP's KeyValue and AnyValue).
"""
from __future__ import annotations

import struct
from pathlib import Path

# The header: signature char[8], version u32, payload_size u32,
# monotonic_published_at_ns u64, payload u64; little-endian on both arches.
HEADER = struct.Struct("<8sIIQQ")
SIGNATURE = b"OTEL_CTX"
# Every name the OTEP's readers look for, as a prefix of the maps path.
MAPPING_NAMES = ("/memfd:OTEL_CTX", "[anon:OTEL_CTX]", "[anon_shmem:OTEL_CTX]")
# The payload size this oracle reads at most.
MAX_PAYLOAD = 1 << 20


class Mapping:
    """One line of /proc/PID/maps."""

    def __init__(self, line):
        fields = line.split(maxsplit=5)
        start, end = fields[0].split("-")
        self.start, self.end = int(start, 16), int(end, 16)
        self.perms = fields[1]
        self.offset = int(fields[2], 16)
        self.name = fields[5] if len(fields) > 5 else ""


def mappings(pid):
    return [Mapping(line) for line in Path(f"/proc/{pid}/maps").read_text().splitlines()]


def context_mappings(pid):
    return [m for m in mappings(pid) if m.name.startswith(MAPPING_NAMES)]


def read_memory(pid, address, size):
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        mem.seek(address)
        data = mem.read(size)
    assert len(data) == size, f"short read at {address:#x}"
    return data


def consistent_read(pid, start, attempts):
    """The OTEP's reading protocol: (header fields, payload bytes) under one non-zero
    timestamp, or None after `attempts` tries."""
    for _ in range(attempts):
        header = HEADER.unpack(read_memory(pid, start, HEADER.size))
        _, _, size, timestamp, payload = header
        if timestamp == 0:
            continue
        assert size <= MAX_PAYLOAD, f"payload_size {size}"
        body = read_memory(pid, payload, size)
        if HEADER.unpack(read_memory(pid, start, HEADER.size))[3] == timestamp:
            return header, body
    return None


# ---- protobuf, decoded here --------------------------------------------------

def _varint(buf, i):
    value = shift = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7
        if shift >= 70:
            raise ValueError("varint longer than 10 bytes")


def wire_fields(buf):
    """[(field number, wire type, value)] of one message; ValueError when the bytes are not one."""
    out, i = [], 0
    while i < len(buf):
        tag, i = _varint(buf, i)
        field, wire = tag >> 3, tag & 7
        if field == 0:
            raise ValueError("field number 0")
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire in (1, 5):
            n = 8 if wire == 1 else 4
            if i + n > len(buf):
                raise ValueError("truncated fixed field")
            value, i = bytes(buf[i:i + n]), i + n
        elif wire == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError(f"field {field}: {n} bytes declared, {len(buf) - i} left")
            value, i = bytes(buf[i:i + n]), i + n
        else:
            raise ValueError(f"field {field}: wire type {wire}")
        out.append((field, wire, value))
    return out


def any_value(buf):
    """An OTLP AnyValue as Python: str, bool, int, float, list, dict, bytes."""
    fields = wire_fields(buf)
    assert len(fields) == 1, f"AnyValue holds one oneof member, not {fields}"
    field, wire, v = fields[0]
    expected_wire = {1: 2, 2: 0, 3: 0, 4: 1, 5: 2, 6: 2, 7: 2}
    assert expected_wire.get(field) == wire, f"AnyValue field {field} with wire type {wire}"
    if field == 1:
        return v.decode("utf-8")
    if field == 2:
        return bool(v)
    if field == 3:
        return v - (1 << 64) if v >= 1 << 63 else v
    if field == 4:
        return struct.unpack("<d", v)[0]
    if field == 5:
        return [any_value(x) for f, _, x in wire_fields(v) if f == 1]
    if field == 6:
        return dict(key_value(x) for f, _, x in wire_fields(v) if f == 1)
    return v


def key_value(buf):
    key, value = None, None
    for field, _, v in wire_fields(buf):
        if field == 1:
            key = v.decode("utf-8")
        elif field == 2:
            value = any_value(v)
    assert key is not None, "KeyValue without a key"
    return key, value


def process_context(buf):
    """ProcessContext {resource = 1 (Resource {attributes = 1}), attributes = 2} as
    {"resource": [(key, value)] or None, "attributes": [(key, value)]}, duplicates kept."""
    decoded = {"resource": None, "attributes": []}
    for field, wire, v in wire_fields(buf):
        if field == 1 and wire == 2:
            decoded["resource"] = [key_value(x) for f, _, x in wire_fields(v) if f == 1]
        elif field == 2 and wire == 2:
            decoded["attributes"].append(key_value(v))
    return decoded
