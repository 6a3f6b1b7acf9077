#!/usr/bin/env python3
"""Generate the C++ and C views of a protocol's registry (spec/<protocol>.json).

A protocol's registry is the one source of its requirement IDs and wire
layouts. The build runs this script once per protocol package; nothing it
writes is committed. Output, for package PKG (e.g. elastic_v1):
  <out>/PKG/registry.hpp  constants, requirement table, the raw JSON and the
                          ProtocolSpec the package registers (C++, namespace
                          tracecorr::PKG::spec)
  <out>/PKG_layout.h      layout constants for C code (fixtures)

Each layout (Elastic's tls_record, messages, ...; a process context's
context_header, mapping_names, payload; a thread context's
thread_context_record, attribute_entry, reference_data, and its tls_variable;
a Node.js thread context's discovery_struct and v8_layout) is checked and turned into constants when the registry has it. A registry names two roles, the side conform judges
(inside the application) first, then the reader outside it.
"""
import json
import re
import sys
from pathlib import Path


def ident(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def cxx_string(s: str) -> str:
    return json.dumps(s)  # a JSON string literal is a valid C string literal for our ASCII text


def cxx_bool(value: bool) -> str:
    return "true" if value else "false"


def check(reg: dict) -> None:
    """Refuse a registry that would generate inconsistent code. Each layout
    check applies when the registry has that layout."""
    ids = [r["id"] for r in reg["requirements"]]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        sys.exit(f"gen_registry: duplicate requirement ids: {sorted(dupes)}")
    if len(reg["roles"]) != 2:
        sys.exit(f"gen_registry: roles must name two sides (the judged one first), not {list(reg['roles'])}")
    for r in reg["requirements"]:
        if not re.fullmatch(r"[A-Z]+-\d\d", r["id"]):
            sys.exit(f"gen_registry: requirement id {r['id']!r} is not of the form AREA-NN")
        if r["area"] not in reg["areas"] or not r["id"].startswith(r["area"] + "-"):
            sys.exit(f"gen_registry: requirement {r['id']} has area {r['area']!r}")
        if r["level"] not in reg["levels"] or r["role"] not in reg["roles"]:
            sys.exit(f"gen_registry: requirement {r['id']} has level/role {r['level']}/{r['role']}")
        for flag in ("judged_by_sending", "timed_by_export"):
            if not isinstance(r.get(flag, False), bool):
                sys.exit(f"gen_registry: requirement {r['id']} has {flag} {r[flag]!r}, not true or false")
    lay = reg.get("layouts", {})
    if "tls_record" in lay:
        tls = lay["tls_record"]
        end = max(f["offset"] + f["size"] for f in tls["fields"])
        if end != tls["size"]:
            sys.exit(f"gen_registry: tls_record fields end at {end}, size says {tls['size']}")
    for m in lay.get("messages", []):
        fixed = [f for f in m["fields"] if "size" in f]
        end = max(f["offset"] + f["size"] for f in fixed)
        if m["name"] == "correlation" and end != m["fixed_size"]:
            sys.exit(f"gen_registry: correlation fields end at {end}, fixed_size says {m['fixed_size']}")
    if "context_header" in lay:
        header = lay["context_header"]
        at = 0
        for f in header["fields"]:  # contiguous, in order, filling the header exactly
            if f["offset"] != at:
                sys.exit(f"gen_registry: context_header field {f['name']} at {f['offset']}, expected {at}")
            at += f["size"]
        if at != header["size"]:
            sys.exit(f"gen_registry: context_header fields end at {at}, size says {header['size']}")
        signature = next(f for f in header["fields"] if f["name"] == "signature")
        if len(header["signature"]) != signature["size"]:
            sys.exit(f"gen_registry: signature {header['signature']!r} is not {signature['size']} bytes")
    for name in ("thread_context_record", "attribute_entry"):
        if name in lay:
            check_sized_record(name, lay[name])
    if "discovery_struct" in lay:
        check_fixed_struct("discovery_struct", lay["discovery_struct"])
        if "tls_variable" in reg and reg["tls_variable"].get("size") != lay["discovery_struct"]["size"]:
            sys.exit("gen_registry: tls_variable size is not the discovery_struct's")
    if "v8_layout" in lay:
        v8 = lay["v8_layout"]
        for key in ("max_buckets",):
            if v8[key] & (v8[key] - 1):
                sys.exit(f"gen_registry: v8_layout {key} {v8[key]} is not a power of two")
        if not 0 < v8["chain_cap"] <= 64:
            sys.exit(f"gen_registry: v8_layout chain_cap {v8['chain_cap']} is not a BPF-sized constant")


def check_fixed_struct(name: str, layout: dict) -> None:
    """A struct of fields contiguous from offset 0, filling size exactly."""
    at = 0
    for f in layout["fields"]:
        if f["offset"] != at:
            sys.exit(f"gen_registry: {name} field {f['name']} at {f['offset']}, expected {at}")
        at += f["size"]
    if at != layout["size"]:
        sys.exit(f"gen_registry: {name} fields end at {at}, size says {layout['size']}")


def check_sized_record(name: str, layout: dict) -> None:
    """A record of a fixed header (fields contiguous from offset 0, filling
    header_size exactly) and one trailing field whose length another field gives."""
    fixed = [f for f in layout["fields"] if "size" in f]
    trailing = [f for f in layout["fields"] if "size" not in f]
    at = 0
    for f in fixed:
        if f["offset"] != at:
            sys.exit(f"gen_registry: {name} field {f['name']} at {f['offset']}, expected {at}")
        at += f["size"]
    if at != layout["header_size"]:
        sys.exit(f"gen_registry: {name} fields end at {at}, header_size says {layout['header_size']}")
    if len(trailing) != 1 or trailing[0]["offset"] != at:
        sys.exit(f"gen_registry: {name} needs one trailing field at {at}, has {[f['name'] for f in trailing]}")
    if trailing[0].get("size_field") not in {f["name"] for f in fixed}:
        sys.exit(f"gen_registry: {name} field {trailing[0]['name']} takes its size from no header field")


def field_constants(prefix: str, fields: list) -> list:
    out = []
    for f in fields:
        if "offset" in f:
            out.append((f"{prefix}_{ident(f['name'])}_OFFSET", f["offset"]))
        if "size" in f:
            out.append((f"{prefix}_{ident(f['name'])}_SIZE", f["size"]))
        if "max_length" in f:
            out.append((f"{prefix}_{ident(f['name'])}_MAX_LENGTH", f["max_length"]))
    return out


def constants(reg: dict) -> list:
    """Numbers, from each layout the registry has."""
    lay = reg.get("layouts", {})
    c = []
    if "library" in reg:
        c.append(("POINTER_SIZE", reg["library"]["pointer_size"]))
    if "utf8_str" in lay:
        c.append(("UTF8_STR_MAX_LENGTH_READ", lay["utf8_str"]["max_length_read"]))
    if "tls_record" in lay:
        c += [("TLS_RECORD_SIZE", lay["tls_record"]["size"]),
              ("TLS_RECORD_MINOR", max(lay["tls_record"]["minor_versions"]))]
    if "process_storage" in lay:
        c.append(("PROCESS_STORAGE_MINOR", max(lay["process_storage"]["minor_versions"])))
    if "message_header" in lay:
        c.append(("MESSAGE_HEADER_SIZE", lay["message_header"]["size"]))
    if "config" in reg:
        c += [("DEFAULT_DELAY_MS", reg["config"]["default_delay_ms"]),
              ("DEFAULT_BUFFER_SIZE", reg["config"]["buffer_size"]["example_default"])]
    if "attribute" in reg:
        c.append(("STACK_TRACE_ID_SIZE", reg["attribute"]["stack_trace_id_size"]))
    if "tls_record" in lay:
        c += field_constants("TLS", lay["tls_record"]["fields"])
    if "message_header" in lay:
        c += field_constants("HEADER", lay["message_header"]["fields"])
    if "process_storage" in lay:
        c += field_constants("PROCESS_STORAGE", lay["process_storage"]["fields"])
    for m in lay.get("messages", []):
        p = "MSG_" + ident(m["name"])
        c += [(f"{p}_TYPE", m["message_type"]), (f"{p}_MINOR", m["current_minor"]),
              (f"{p}_FIXED_SIZE", m["fixed_size"])]
        c += field_constants(p, m["fields"])
    if "context_header" in lay:
        h = lay["context_header"]
        c += [("CONTEXT_HEADER_SIZE", h["size"]), ("CONTEXT_CURRENT_VERSION", h["current_version"]),
              ("CONTEXT_DEVELOPMENT_VERSION", h["development_version"])]
        c += field_constants("CONTEXT_HEADER", h["fields"])
    if "payload" in lay:
        p = lay["payload"]
        for group, prefix in (("fields", "PAYLOAD"), ("resource_fields", "RESOURCE"), ("key_value_fields", "KEY_VALUE")):
            c += [(f"{prefix}_{ident(f['name'])}_FIELD", f["number"]) for f in p.get(group, [])]
        c += [("PAYLOAD_INTEROPERABLE_MAX_SIZE", p["interoperable_max_size"]),
              ("PAYLOAD_READER_DEFAULT_MAX_SIZE", p["reader_default_max_size"])]
    if "tls_variable" in reg:
        c.append(("POINTER_SIZE", reg["tls_variable"]["pointer_size"]))
    if "thread_context_record" in lay:
        r = lay["thread_context_record"]
        c += [("RECORD_HEADER_SIZE", r["header_size"]), ("RECORD_ALIGNMENT", r["alignment"]),
              ("RECORD_VALID_VALUE", r["valid_value"]), ("RECORD_INVALID_VALUE", r["invalid_value"]),
              ("RECORD_RECOMMENDED_MAX_SIZE", r["recommended_max_size"])]
        c += field_constants("RECORD", r["fields"])
    if "attribute_entry" in lay:
        c.append(("ATTRIBUTE_ENTRY_HEADER_SIZE", lay["attribute_entry"]["header_size"]))
        c += field_constants("ATTRIBUTE_ENTRY", lay["attribute_entry"]["fields"])
    if "reference_data" in lay:
        c.append(("MAX_KEYS", lay["reference_data"]["max_keys"]))
    if "tls_variable" in reg and "size" in reg["tls_variable"]:
        c.append(("TLS_VARIABLE_SIZE", reg["tls_variable"]["size"]))
    if "discovery_struct" in lay:
        c.append(("DISCOVERY_SIZE", lay["discovery_struct"]["size"]))
        c += field_constants("DISCOVERY", lay["discovery_struct"]["fields"])
    if "v8_layout" in lay:
        c += [(f"V8_{ident(k)}", v) for k, v in lay["v8_layout"].items() if isinstance(v, int) and v >= 0]
    return c


def signed_constants(reg: dict) -> list:
    """Numbers that may be negative (a V8 layout's sentinels)."""
    lay = reg.get("layouts", {})
    if "v8_layout" not in lay:
        return []
    return [(f"V8_{ident(k)}", v) for k, v in lay["v8_layout"].items() if isinstance(v, int) and v < 0]


def strings(reg: dict) -> list:
    """Names, from each part the registry has."""
    lay = reg.get("layouts", {})
    s = []
    if "library" in reg:
        lib = reg["library"]
        s += [("LIBRARY_NAME_REGEX", lib["name_regex"]),
              ("PROCESS_STORAGE_SYMBOL", lib["process_storage_symbol"]),
              ("TLS_SYMBOL", lib["tls_symbol"])]
    if "attribute" in reg:
        s.append(("ATTRIBUTE_NAME", reg["attribute"]["name"]))
    if "config" in reg:
        s += [("ENV_ENABLED", reg["config"]["enabled"]["env"]),
              ("ENV_SOCKET_DIR", reg["config"]["socket_dir"]["env"]),
              ("ENV_BUFFER_SIZE", reg["config"]["buffer_size"]["env"])]
    if "context_header" in lay:
        s.append(("CONTEXT_SIGNATURE", lay["context_header"]["signature"]))
    for n in lay.get("mapping_names", []):
        s.append((f"MAPPING_NAME_{ident(n['kind'])}", n["prefix"]))
    if "mapping" in lay:
        m = lay["mapping"]
        s += [("MEMFD_NAME", m["memfd_name"]), ("PRCTL_NAME", m["prctl_name"]),
              ("MAPPING_PERMS", m["perms"]), ("VM_FLAG_DONTFORK", m["vm_flag_dontfork"])]
    if "payload" in lay:
        s += [("PAYLOAD_MESSAGE", lay["payload"]["message"]),
              ("THREADLOCAL_PREFIX", lay["payload"]["threadlocal_prefix"])]
    if "tls_variable" in reg:
        s.append(("TLS_SYMBOL", reg["tls_variable"]["symbol"]))
    if "reference_data" in lay:
        d = lay["reference_data"]
        s += [("SCHEMA_VERSION_KEY", d["schema_version_key"]), ("ATTRIBUTE_KEY_MAP_KEY", d["attribute_key_map_key"]),
              ("PUBLISHED_SCHEMA_VERSION", d["published_schema_version"])]
    return s


def string_lists(reg: dict) -> list:
    """Lists of names (C++ only: C code has no use for them yet)."""
    lay = reg.get("layouts", {})
    out = []
    if "reference_data" in lay:
        out.append(("SCHEMA_VERSIONS", lay["reference_data"]["schema_versions"]))
        if "revision_1_layout_keys" in lay["reference_data"]:
            out.append(("REVISION_1_LAYOUT_KEYS", lay["reference_data"]["revision_1_layout_keys"]))
    return out


def write_cxx(reg: dict, raw: str, source: str, package: str, path: Path) -> None:
    lines = [
        f"// Generated by spec/gen_registry.py from {source}. Do not edit.",
        "#pragma once",
        "#include <array>",
        "#include <cstddef>",
        "#include <cstdint>",
        "#include <string_view>",
        "",
        "#include \"tracecorr/protocol.hpp\"",
        "",
        f"namespace tracecorr::{package}::spec {{",
        "",
    ]
    for name, value in constants(reg):
        lines.append(f"inline constexpr std::size_t k{''.join(w.capitalize() for w in name.split('_'))} = {value};")
    for name, value in signed_constants(reg):
        lines.append(f"inline constexpr std::int64_t k{''.join(w.capitalize() for w in name.split('_'))} = {value};")
    lines.append("")
    for name, value in strings(reg):
        lines.append(f"inline constexpr std::string_view k{''.join(w.capitalize() for w in name.split('_'))} = {cxx_string(value)};")
    for name, values in string_lists(reg):
        lines.append(f"inline constexpr std::array<std::string_view, {len(values)}> "
                     f"k{''.join(w.capitalize() for w in name.split('_'))}{{{', '.join(cxx_string(v) for v in values)}}};")
    lines.append("")
    level = {"MUST": "Level::Must", "SHOULD": "Level::Should", "MAY": "Level::May"}
    # The registry's two roles, in order: the side conform judges (the one
    # inside the application), then the side outside it that reads.
    judged, reader = list(reg["roles"])
    role = {judged: "Role::Agent", reader: "Role::Profiler"}
    reqs = reg["requirements"]
    lines.append(f"inline constexpr std::array<Requirement, {len(reqs)}> kRequirements{{{{")
    for r in reqs:
        lines.append(f"  {{{cxx_string(r['id'])}, {level[r['level']]}, {cxx_string(r['area'])}, "
                     f"{role[r['role']]}, {cxx_string(r['role'])}, {cxx_string(r['source'])}, {cxx_string(r['summary'])}, "
                     f"{cxx_bool(r.get('judged_by_sending', False))}, {cxx_bool(r.get('timed_by_export', False))}}},")
    lines.append("}};")
    lines.append("")
    lines.append("// The requirement with this id in this protocol, or nullptr.")
    lines.append("constexpr const Requirement* find_requirement(std::string_view id) {")
    lines.append("  for (const auto& r : kRequirements)")
    lines.append("    if (r.id == id) return &r;")
    lines.append("  return nullptr;")
    lines.append("}")
    lines.append("")
    # The raw registry, for `tracecorr list --json` and the Python package.
    lines.append("inline constexpr std::string_view kRegistryJson = R\"tracecorr_json(" + raw + ")tracecorr_json\";")
    lines.append("")
    lines.append("// What the engine is told of this protocol (register_protocol).")
    lines.append(f"inline constexpr ProtocolSpec kProtocol{{{cxx_string(package.replace('_', '-'))}, "
                 f"{cxx_string(reg['protocol'] + ' ' + reg['protocol_version'])}, kRequirements, kRegistryJson}};")
    lines.append("")
    lines.append(f"}}  // namespace tracecorr::{package}::spec")
    path.write_text("\n".join(lines) + "\n")


def write_c(reg: dict, source: str, package: str, path: Path) -> None:
    guard = f"TRACECORR_{package.upper()}_LAYOUT_H"
    lines = [
        f"/* Generated by spec/gen_registry.py from {source}. Do not edit. */",
        f"#ifndef {guard}",
        f"#define {guard}",
        "",
    ]
    for name, value in constants(reg) + signed_constants(reg):
        lines.append(f"#define TC_{name} ({value})" if value < 0 else f"#define TC_{name} {value}")
    lines.append("")
    for name, value in strings(reg):
        if name == "LIBRARY_NAME_REGEX":
            continue  # C code never matches names; keep backslashes out of the C header
        lines.append(f"#define TC_{name} {cxx_string(value)}")
    lines += ["", "#endif"]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit("usage: gen_registry.py REGISTRY.json OUTDIR PACKAGE")
    src, out, package = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    if not re.fullmatch(r"[a-z][a-z0-9_]*", package):
        sys.exit(f"gen_registry: package name {package!r} is not a C identifier in lower case")
    raw = src.read_text()
    reg = json.loads(raw)
    check(reg)
    source = f"spec/{src.name}"
    (out / package).mkdir(parents=True, exist_ok=True)
    write_cxx(reg, raw, source, package, out / package / "registry.hpp")
    write_c(reg, source, package, out / f"{package}_layout.h")


if __name__ == "__main__":
    main()
