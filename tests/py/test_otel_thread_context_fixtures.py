"""The OTEP 4947 writer fixtures (fixtures/otel_thread_context) publish what the OTEP says, in every TLS model.

Checked from outside and without tracecorr's readers, so that a misreading they share cannot hide:
- ELF facts with readelf (binutils): where otel_thread_ctx_v1 is defined, its type, size and visibility, and
  the relocations that name it (a TLS descriptor, DTPMOD/DTPOFF, TPOFF, or none: local-exec).
- The schema version and the key map in the process context (tests/support/process_context_oracle.py).
- Each thread's record, read through /proc/PID/mem while the process is stopped (SIGSTOP: the OTEP's readers
  read stopped threads) at the address of the thread's otel_thread_ctx_v1 that the driver journals; and that
  address checked against what the ELF file and the loader's data in memory lead to: a static TLS
  descriptor's argument, a dynamic one's module and offset through the thread's DTV (glibc's and musl's), an
  initial-exec GOT slot, DTPMOD/DTPOFF GOT slots, or PT_TLS for the executable.

The x86-64 programs run natively, the arm64 ones under qemu-aarch64 (tests/support/fixture_process.py).
Build outputs: <build>/fixtures/<arch>/otel_thread_context/{reference/<model>,mutants/<name>}/otel-tctx-writer,
with libotel-tctx-writer.so where the model has a library; reference/models.json lists the models built.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from build_products import BUILD, HOST_ARCH, REPO, need, package_fixture_program
from fixture_process import WAIT_S, FixtureProcess, command_for
from process_context_oracle import consistent_read, context_mappings, mappings, process_context

PACKAGE = "otel_thread_context"
PROGRAM = "otel-tctx-writer"
LIBRARY = "libotel-tctx-writer.so"
SYMBOL = "otel_thread_ctx_v1"
ARCHES = ["x86_64", "arm64"]
MUTANTS = json.loads((REPO / "fixtures" / PACKAGE / "mutants" / "mutants.json").read_text())
REQUIREMENTS = json.loads((REPO / "spec" / "otel-thread-context.json").read_text())["requirements"]
READELF = shutil.which("readelf")
MUSL_WRAPPERS = {"x86_64": "musl-gcc", "arm64": "aarch64-linux-musl-gcc"}

# ---- the OTEP's record, spelled here -----------------------------------------------------------------------
# trace_id[16], span_id[8], valid u8, trace_flags u8, attrs_data_size u16 (native: little-endian on both arches).
RECORD_HEADER = struct.Struct("<16s8sBBH")
RECOMMENDED_MAX = 640
READ_BOUND = 1024  # what this test reads of a record at most
SCHEMA_VERSION = "tlsdesc_v1_dev"
SCHEMA_VERSION_KEY = "threadlocal.schema_version"
KEY_MAP_KEY = "threadlocal.attribute_key_map"

# ---- what the driver publishes (driver/otel_tctx_writer.c) -------------------------------------------------
INITIAL_KEYS = ["http.route", "http.method", "tracecorr.note", "http.status_code"]
LATE_KEY = "tracecorr.late"
NOTE = "\u00e9" * 127  # 200 x U+00E9, shortened at a character boundary to fit 255 bytes: 254
APPENDED = (3, b"200")
HOLD = ["--threads", "2", "--hold"]

# Attempts at seeing a state a mutant holds for 300 ms; the reference must show none of them in as many.
OBSERVATIONS = 60
OBSERVATION_GAP_S = 0.03
# |descriptor argument| below this is an offset from the thread pointer; above, a pointer to loader data.
STATIC_OFFSET_BOUND = 1 << 20


def span_ids(index, n):
    """(trace_id, span_id, trace_flags) of span n (from 1) of worker `index`."""
    seq = ((index + 1) << 32 | n).to_bytes(8, "big")
    return b"\x7c" * 8 + seq, b"\x5e" + seq[1:], 0x01 if n & 1 else 0x00


def ids_agree(record):
    """Both ids belong to one span: trace_id ends with the sequence span_id carries."""
    return record.trace_id[:9] == b"\x7c" * 8 + b"\0" and record.trace_id[9:] == record.span_id[1:] \
        and record.span_id[0] == 0x5e


def expected_entries(index, appended=False):
    entries = [(0, f"/work/{index}".encode()), (1, b"GET"), (2, NOTE.encode())]
    return entries + [APPENDED] if appended else entries


# ---- build products --------------------------------------------------------------------------------------

def models_built(arch):
    return json.loads(need(BUILD / "fixtures" / arch / PACKAGE / "reference" / "models.json").read_text())["models"]


def model_dir(arch, model):
    return package_fixture_program(PACKAGE, PROGRAM, arch).parent / model


def model_program(arch, model):
    if model.startswith("musl-") and shutil.which(MUSL_WRAPPERS[arch]) is None:
        pytest.skip(f"{MUSL_WRAPPERS[arch]} not installed: no musl models for {arch}")
    return need(model_dir(arch, model) / PROGRAM)


def mutant_program(arch, name):
    return need(package_fixture_program(PACKAGE, PROGRAM, arch, name))


# ---- ELF, through readelf --------------------------------------------------------------------------------

def readelf(*args):
    if READELF is None:
        pytest.skip("readelf (binutils) not installed")
    return subprocess.run([READELF, "-W", *args], capture_output=True, text=True, check=True).stdout


@dataclass
class Symbol:
    value: int
    size: int
    type: str
    bind: str
    visibility: str
    section: str
    name: str


def symbols(path, table):
    """The symbols of `table` (".dynsym" or ".symtab")."""
    out, current = [], None
    for line in readelf("--syms", str(path)).splitlines():
        m = re.match(r"Symbol table '([^']+)'", line)
        if m:
            current = m.group(1)
            continue
        fields = line.split()
        if current == table and len(fields) >= 8 and re.fullmatch(r"\d+:", fields[0]):
            out.append(Symbol(int(fields[1], 16), int(fields[2], 0), fields[3], fields[4], fields[5], fields[6],
                              fields[7].split("@")[0]))
    return out


def symbol(path, table, name=SYMBOL):
    found = [s for s in symbols(path, table) if s.name == name and s.section != "UND"]
    return found[0] if found else None


@dataclass
class Relocation:
    offset: int
    type: str
    symbol: str  # "" for none (symbol index 0)


def relocations(path):
    out = []
    for line in readelf("--relocs", str(path)).splitlines():
        fields = line.split()
        if len(fields) >= 3 and re.fullmatch(r"[0-9a-f]{16}", fields[0]) and fields[2].startswith("R_"):
            has_symbol = int(fields[1], 16) >> 32 != 0
            out.append(Relocation(int(fields[0], 16), fields[2], fields[4].split("@")[0] if has_symbol else ""))
    return out


# The psABI's names, as readelf prints them.
TLS_RELOCATIONS = {
    "x86_64": {"descriptor": "R_X86_64_TLSDESC", "module": "R_X86_64_DTPMOD64", "module_offset": "R_X86_64_DTPOFF64",
               "thread_pointer_offset": "R_X86_64_TPOFF64"},
    "arm64": {"descriptor": "R_AARCH64_TLSDESC", "module": "R_AARCH64_TLS_DTPMOD64",
              "module_offset": "R_AARCH64_TLS_DTPREL64", "thread_pointer_offset": "R_AARCH64_TLS_TPREL64"},
}


def tls_relocations(path, arch):
    """{kind: [Relocation]} of the TLS relocations in `path`."""
    kinds = {v: k for k, v in TLS_RELOCATIONS[arch].items()}
    out = {}
    for r in relocations(path):
        if r.type in kinds:
            out.setdefault(kinds[r.type], []).append(r)
    return out


def naming_symbol(found, kind):
    return [r for r in found.get(kind, []) if r.symbol == SYMBOL]


def program_headers(path):
    """{type: [(vaddr, memsz, align)]}"""
    out = {}
    for line in readelf("--program-headers", str(path)).splitlines():
        fields = line.split()
        if len(fields) >= 8 and re.fullmatch(r"0x[0-9a-f]+", fields[1] if len(fields) > 1 else ""):
            out.setdefault(fields[0], []).append((int(fields[2], 16), int(fields[5], 16), int(fields[-1], 16)))
    return out


def dynamic_tags(path):
    return [(m.group(1), m.group(2)) for m in re.finditer(r"^\s*0x[0-9a-f]+ \((\w+)\)\s+(.*)$",
                                                          readelf("--dynamic", str(path)), re.M)]


# ---- the models ------------------------------------------------------------------------------------------

@dataclass
class Model:
    libc: str
    holder: str   # where otel_thread_ctx_v1 is defined: "library" or "executable"
    access: str   # descriptor, general-dynamic, initial-exec, local-exec
    loaded: str   # library models: "linked" or "dlopen"
    static: bool  # a static-pie executable
    arches: tuple = ("x86_64", "arm64")
    # The module has thread-locals of its own beside the variable, which it reaches by module-only
    # relocations (Rust's standard library, compiled general-dynamic: DTPMOD64 naming no symbol).
    own_thread_locals: bool = False


MODELS = {
    "tlsdesc": Model("glibc", "library", "descriptor", "linked", False),
    "tlsdesc-dlopen": Model("glibc", "library", "descriptor", "dlopen", False),
    "general-dynamic": Model("glibc", "library", "general-dynamic", "linked", False),
    "lib-initial-exec": Model("glibc", "library", "initial-exec", "linked", False),
    "exe-initial-exec": Model("glibc", "executable", "local-exec", "", False),  # ld relaxes IE to LE
    "exe-local-exec": Model("glibc", "executable", "local-exec", "", False),
    "static-pie": Model("glibc", "executable", "local-exec", "", True),
    "musl-tlsdesc": Model("musl", "library", "descriptor", "linked", False),
    "musl-dlopen": Model("musl", "library", "descriptor", "dlopen", False),
    "musl-general-dynamic": Model("musl", "library", "general-dynamic", "linked", False),
    "musl-static-pie": Model("musl", "executable", "local-exec", "", True),
    # rust/otel_tctx_rs.rs: rustc with TLS descriptors; the variable at the start of .tbss, after std's.
    "rust-cdylib": Model("glibc", "library", "descriptor", "dlopen", False, ("x86_64",), True),
}
# Which relocations name otel_thread_ctx_v1 in the module that defines it.
NAMING_RELOCATIONS = {"descriptor": {"descriptor"}, "general-dynamic": {"module", "module_offset"},
                      "initial-exec": {"thread_pointer_offset"}, "local-exec": set()}
MODEL_CASES = [(arch, model) for arch in ARCHES for model in MODELS if arch in MODELS[model].arches]


def holder_path(arch, model):
    directory = model_dir(arch, model)
    return need(directory / (LIBRARY if MODELS[model].holder == "library" else PROGRAM))


def test_every_model_is_listed_and_built():
    for arch in ARCHES:
        built = models_built(arch)
        ours = {m for m in MODELS if arch in MODELS[m].arches}
        glibc = {m for m in ours if MODELS[m].libc == "glibc"}
        assert glibc <= set(built), f"{arch}: glibc models missing from models.json: {glibc - set(built)}"
        if shutil.which(MUSL_WRAPPERS[arch]):
            assert ours == set(built), f"{arch}: {ours ^ set(built)}"
        for model in built:
            assert model in MODELS, f"{arch}: models.json lists {model}, which this test does not know"
            need(model_dir(arch, model) / PROGRAM)


@pytest.mark.parametrize("arch,model", MODEL_CASES)
def test_model_elf(arch, model):
    """The symbol and the relocations of each model, as the OTEP lists them."""
    spec = MODELS[model]
    program = model_program(arch, model)
    holder = holder_path(arch, model)

    exported = symbol(holder, ".dynsym")
    assert exported is not None, f"{SYMBOL} is not in the .dynsym of {holder.name}"
    assert (exported.type, exported.bind, exported.visibility, exported.size) == ("TLS", "GLOBAL", "DEFAULT", 8)

    found = tls_relocations(holder, arch)
    naming = {kind for kind in found if naming_symbol(found, kind)}
    assert naming == NAMING_RELOCATIONS[spec.access], f"relocations naming {SYMBOL}: {naming}"
    if spec.own_thread_locals:  # only its own: none of the variable's relocations is module-only
        assert not any(r.symbol == "" for r in found.get("descriptor", [])), "a module-only TLS descriptor"
        assert len(program_headers(holder).get("TLS", [])) == 1
    else:
        assert not any(r.symbol == "" for rs in found.values() for r in rs), "a module-only TLS relocation (local-dynamic)"
    if spec.access == "initial-exec" and arch == "x86_64":  # binutils' aarch64 ld never sets DF_STATIC_TLS
        assert ("FLAGS", "STATIC_TLS") in dynamic_tags(holder)
    if spec.holder == "executable":
        assert found == {}, f"{model}: the linker relaxes every access to the executable's own variable: {found}"
        assert len(program_headers(holder).get("TLS", [])) == 1
    if spec.static:
        assert "INTERP" not in program_headers(program)
        assert "DYN" in readelf("--file-header", str(program)), "static-pie: a position-independent executable"
    needed = [value for tag, value in dynamic_tags(program) if tag == "NEEDED"]
    if spec.holder == "library":
        assert (f"Shared library: [{LIBRARY}]" in needed) == (spec.loaded == "linked"), needed
    if not spec.static:
        libc = "[libc.so]" if spec.libc == "musl" else "[libc.so.6]"
        assert any(n.endswith(libc) for n in needed), needed
        interpreter = re.search(r"program interpreter: ([^\]]+)\]", readelf("--program-headers", str(program)))
        assert ("ld-musl-" in interpreter.group(1)) == (spec.libc == "musl"), interpreter.group(1)


# ---- a running writer ------------------------------------------------------------------------------------

@dataclass
class Record:
    address: int
    trace_id: bytes
    span_id: bytes
    valid: int
    flags: int
    size: int
    attrs: bytes  # at most READ_BOUND - 28 bytes of attrs_data

    def entries(self):
        """(complete entries [(key, value bytes)] within attrs_data_size, bytes left that hold no complete entry)."""
        data, at, out = self.attrs[:self.size], 0, []
        while len(data) - at >= 2:
            key, length = data[at], data[at + 1]
            if at + 2 + length > len(data):
                break
            out.append((key, data[at + 2:at + 2 + length]))
            at += 2 + length
        return out, len(data) - at


class Writer(FixtureProcess):
    FIRST_LINE = re.compile(r"otel-tctx-writer pid=(\d+) model=([a-z0-9-]+) style=(swap|in-place) threads=(\d+) "
                            r"mapping=(0x[0-9a-f]+)")

    def __init__(self, arch, program, journal_path, args, env=None):
        super().__init__(command_for(arch, program) + list(args), journal_path, env)
        line = self.read_line()
        m = self.FIRST_LINE.fullmatch(line)
        assert m, f"unexpected first stdout line {line!r}"
        self.pid, self.model, self.style, self.thread_count = int(m.group(1)), m.group(2), m.group(3), int(m.group(4))
        self.arch = arch

    def wait_ready(self):
        self.wait_journal("ready", 1)
        return {t["index"]: t for t in self.journal("thread")}

    def u64(self, address):
        return int.from_bytes(self.read(address, 8), "little")

    @contextlib.contextmanager
    def frozen(self):
        """Every thread stopped (SIGSTOP), as the OTEP's readers read; SIGCONT after."""
        os.kill(self.pid, signal.SIGSTOP)
        try:
            deadline = time.monotonic() + WAIT_S
            while not all(state in "tT" for state in self.task_states()):
                assert time.monotonic() < deadline, f"threads of {self.pid} did not stop: {self.task_states()}"
                time.sleep(0.001)
            yield
        finally:
            os.kill(self.pid, signal.SIGCONT)

    def task_states(self):
        states = []
        for task in Path(f"/proc/{self.pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                stat = (task / "stat").read_text()
                states.append(stat[stat.rindex(")") + 2])
        return states

    def record(self, variable):
        """The record a thread's otel_thread_ctx_v1 (at `variable`) leads to, or None."""
        address = self.u64(variable)
        if address == 0:
            return None
        trace_id, span_id, valid, flags, size = RECORD_HEADER.unpack(self.read(address, RECORD_HEADER.size))
        attrs = self.read(address + RECORD_HEADER.size, min(size, READ_BOUND - RECORD_HEADER.size)) if size else b""
        return Record(address, trace_id, span_id, valid, flags, size, attrs)

    def context(self):
        """The process context's `attributes` as a dict (a key twice fails)."""
        found = context_mappings(self.pid)
        assert len(found) == 1, [m.name for m in found]
        read = consistent_read(self.pid, found[0].start, 1000)
        assert read is not None, "no consistent read of the process context"
        attributes = process_context(read[1])["attributes"]
        assert len({k for k, _ in attributes}) == len(attributes), attributes
        return dict(attributes)

    def snapshot(self, threads):
        """({index: Record or None}, process context attributes), all read while the process is stopped; the
        records first, so a key map read after them must already name every key they use."""
        with self.frozen():
            records = {i: self.record(int(t["variable"], 16)) for i, t in threads.items()}
            return records, self.context()

    def observe(self, threads, sign):
        """Whether `sign(records, context)` holds in one of OBSERVATIONS snapshots."""
        for _ in range(OBSERVATIONS):
            if sign(*self.snapshot(threads)):
                return True
            time.sleep(OBSERVATION_GAP_S)
        return False


@pytest.fixture
def writers(tmp_path):
    started = []

    def start(arch, program, args=(), env=None):
        w = Writer(arch, program, tmp_path / f"journal-{len(started)}.jsonl", args, env)
        started.append(w)
        return w

    yield start
    for w in started:
        if w.proc.returncode is None:
            w.stop()


def check_record(record, index, appended=False):
    trace_id, span_id, flags = span_ids(index, 1)
    assert record is not None, f"thread {index} published no record"
    assert (record.trace_id, record.span_id, record.valid, record.flags) == (trace_id, span_id, 1, flags)
    assert record.address % 2 == 0, "aligned to 2 bytes"
    assert RECORD_HEADER.size + record.size <= RECOMMENDED_MAX
    entries, left = record.entries()
    assert left == 0, "attrs_data ends with a complete entry"
    assert entries == expected_entries(index, appended)
    for _, value in entries:
        value.decode("utf-8")


# ---- where each thread's variable is, from the ELF file and the loader's data ----------------------------

def load_base(pid, path):
    real = os.path.realpath(path)
    starts = [m.start for m in mappings(pid) if m.offset == 0 and m.name and os.path.realpath(m.name) == real]
    assert starts, f"{real} is not mapped in {pid}"
    return min(starts)


def signed(value):
    return value - (1 << 64) if value >= 1 << 63 else value


def dtv_block(w, libc, thread_pointer, module):
    """The address of module `module`'s TLS block for the thread, through its DTV. glibc keeps the DTV's
    address in its TCB at the thread pointer (+8 on x86-64, where fs:0 points to the TCB itself), musl in
    struct pthread (+8 on x86-64; on arm64 the last member, just below the thread pointer). glibc's entries
    are 16 bytes ({pointer, is_static}), musl's 8, both indexed by module id."""
    if w.arch == "x86_64":
        dtv = w.u64(thread_pointer + 8)
    elif libc == "glibc":
        dtv = w.u64(thread_pointer)
    else:
        dtv = w.u64(thread_pointer - 8)
    return w.u64(dtv + (16 if libc == "glibc" else 8) * module)


def variable_from_elf(w, model, thread):
    """(how, address of the thread's otel_thread_ctx_v1) from the ELF file and the loader's data in memory."""
    spec = MODELS[model]
    holder = holder_path(w.arch, model)
    tp = int(thread["thread_pointer"], 16)
    exported = symbol(holder, ".dynsym")
    if spec.holder == "executable":
        (vaddr, memsz, align), = program_headers(holder)["TLS"]
        assert vaddr % align == 0
        if w.arch == "x86_64":  # TLS variant II: the executable's block ends at the thread pointer
            return "local-exec", tp + exported.value - (memsz + align - 1) // align * align
        return "local-exec", tp + (16 + align - 1) // align * align + exported.value  # variant I: a 16-byte TCB first
    base = load_base(w.pid, holder)
    found = tls_relocations(holder, w.arch)
    if spec.access == "descriptor":
        descriptor, = naming_symbol(found, "descriptor")
        arg = w.u64(base + descriptor.offset + 8)  # {entry, argument}
        if abs(signed(arg)) < STATIC_OFFSET_BOUND:
            return "static descriptor", (tp + arg) % (1 << 64)
        module, offset = w.u64(arg), w.u64(arg + 8)  # glibc's tlsdesc_dynamic_arg, musl's args: {module, offset}
        return "dynamic descriptor", dtv_block(w, spec.libc, tp, module) + offset
    if spec.access == "initial-exec":
        slot, = naming_symbol(found, "thread_pointer_offset")
        return "initial-exec", (tp + w.u64(base + slot.offset)) % (1 << 64)
    module_slot, = naming_symbol(found, "module")
    offset_slot, = naming_symbol(found, "module_offset")
    module, offset = w.u64(base + module_slot.offset), w.u64(base + offset_slot.offset)
    assert 1 <= module < 64, f"module id {module}"
    assert offset == exported.value
    return "general-dynamic", dtv_block(w, spec.libc, tp, module) + offset


# ---- the reference, in every model -----------------------------------------------------------------------

@pytest.mark.parametrize("arch,model", MODEL_CASES)
def test_model_publishes_each_threads_context(arch, model, writers):
    w = writers(arch, model_program(arch, model), HOLD + ["--threads", "3", "--append"])
    assert (w.model, w.style, w.thread_count) == (model, "swap", 3)
    threads = w.wait_ready()
    assert sorted(threads) == [0, 1, 2]
    records, context = w.snapshot(threads)

    assert context[SCHEMA_VERSION_KEY] == SCHEMA_VERSION
    assert context[KEY_MAP_KEY] == INITIAL_KEYS
    for index, thread in threads.items():
        check_record(records[index], index, appended=True)
        published, = [r for r in w.journal("record") if r["index"] == index]
        assert int(published["record"], 16) == records[index].address

    hows = set()
    with w.frozen():
        for thread in threads.values():
            how, address = variable_from_elf(w, model, thread)
            assert address == int(thread["variable"], 16), f"{how}: thread {thread['index']}"
            hows.add(how)
    expected = {"local-exec"} if MODELS[model].holder == "executable" else \
        {"dynamic descriptor"} if model == "musl-dlopen" else \
        {"static descriptor"} if MODELS[model].access == "descriptor" else {MODELS[model].access}
    assert hows == expected
    w.stop()
    assert w.returncode == 0, f"SIGTERM ends the writer with status 0: {w.stderr}"


@pytest.mark.parametrize("arch", ARCHES)
def test_dlopen_forced_into_dynamic_tls(arch, writers):
    """glibc gives a dlopen()ed library static TLS while its optional surplus lasts; with none
    (glibc.rtld.optional_static_tls=0) the descriptor is the dynamic one and the variable is reached through
    each thread's DTV, a separate allocation per thread."""
    env = dict(os.environ, GLIBC_TUNABLES="glibc.rtld.optional_static_tls=0")
    w = writers(arch, model_program(arch, "tlsdesc-dlopen"), HOLD + ["--threads", "3"], env=env)
    threads = w.wait_ready()
    assert w.journal("config")[0]["glibc_tunables"] == "glibc.rtld.optional_static_tls=0"
    records, _ = w.snapshot(threads)
    with w.frozen():
        for index, thread in threads.items():
            check_record(records[index], index)
            how, address = variable_from_elf(w, "tlsdesc-dlopen", thread)
            assert (how, address) == ("dynamic descriptor", int(thread["variable"], 16))
    assert len({t["tls_offset"] for t in threads.values()}) == len(threads), "no common offset from the thread pointer"


# ---- both update styles, appending, late keys, detaching (natively) -----------------------------------------

host_only = pytest.mark.skipif(HOST_ARCH != "x86_64", reason="runs the x86-64 programs natively")
SPANS = ["--threads", "2", "--span-ms", "20"]


def reference():
    return model_program(HOST_ARCH, "tlsdesc")


@host_only
@pytest.mark.parametrize("style", ["swap", "in-place"])
def test_update_styles(style, writers):
    """Pointer swap: two buffers alternate, and a record is never seen invalid or torn while pointed to.
    In-place: one record per thread, pointed to for good, valid 0 between spans, never torn while valid."""
    w = writers(HOST_ARCH, reference(), SPANS + ["--style", style, "--append"])
    threads = w.wait_ready()
    addresses = {i: set() for i in threads}
    valid_seen = {i: set() for i in threads}
    deadline = time.monotonic() + WAIT_S
    while not all(len(addresses[i]) == (2 if style == "swap" else 1) and
                  (style == "swap" or valid_seen[i] == {0, 1}) for i in threads):
        assert time.monotonic() < deadline, (addresses, valid_seen)
        records, context = w.snapshot(threads)
        for i, r in records.items():
            if r is None:
                assert style == "swap", "in-place: the pointer stays set"
                continue
            addresses[i].add(r.address)
            valid_seen[i].add(r.valid)
            assert r.valid in (0, 1)
            if style == "swap":
                assert r.valid == 1, "pointer swap: a pointed-to record is valid"
            if r.valid == 1:
                assert ids_agree(r), f"torn record {r}"
                entries, left = r.entries()
                assert left == 0 and entries in (expected_entries(i), expected_entries(i, appended=True)), entries
        assert all(len(a) <= (2 if style == "swap" else 1) for a in addresses.values()), addresses
        time.sleep(0.005)


@host_only
def test_late_key_is_published_before_records_use_it(writers):
    w = writers(HOST_ARCH, reference(), SPANS + ["--late-key-after-ms", "100"])
    threads = w.wait_ready()
    deadline = time.monotonic() + WAIT_S
    while True:
        assert time.monotonic() < deadline, "no record carried the late key"
        records, context = w.snapshot(threads)
        used = {key for r in records.values() if r is not None and r.valid == 1 for key, _ in r.entries()[0]}
        assert used <= set(range(len(context[KEY_MAP_KEY]))), f"keys {used} outside {context[KEY_MAP_KEY]}"
        if 4 in used:
            assert context[KEY_MAP_KEY] == INITIAL_KEYS + [LATE_KEY]
            break
    maps = [e["keys"] for e in w.journal("key_map")]
    assert maps == [INITIAL_KEYS, INITIAL_KEYS + [LATE_KEY]], "one publication per new key, appended"


@host_only
def test_late_keys_every_period_grow_the_key_map_one_publication_each(writers):
    w = writers(HOST_ARCH, reference(), SPANS + ["--late-key-after-ms", "50", "--late-key-every-ms", "100"])
    threads = w.wait_ready()
    deadline = time.monotonic() + WAIT_S
    while len(w.journal("key_map")) < 4:
        assert time.monotonic() < deadline, f"key maps published: {w.journal('key_map')}"
        time.sleep(0.02)
    records, context = w.snapshot(threads)
    used = {key for r in records.values() if r is not None and r.valid == 1 for key, _ in r.entries()[0]}
    assert used <= set(range(len(context[KEY_MAP_KEY]))), f"keys {used} outside {context[KEY_MAP_KEY]}"
    maps = [e["keys"] for e in w.journal("key_map")][:4]
    late = [LATE_KEY, LATE_KEY + ".2", LATE_KEY + ".3"]
    assert maps == [INITIAL_KEYS] + [INITIAL_KEYS + late[:k] for k in (1, 2, 3)], "each period's key appended once"


@host_only
@pytest.mark.parametrize("style", ["swap", "in-place"])
def test_detached_after_the_last_span(style, writers):
    w = writers(HOST_ARCH, reference(), SPANS + ["--style", style, "--spans", "2"])
    threads = w.wait_ready()
    w.wait_journal("idle", len(threads))
    records, _ = w.snapshot(threads)
    for r in records.values():
        assert r is None if style == "swap" else r.valid == 0


# ---- mutants ---------------------------------------------------------------------------------------------

def test_a_mutant_for_every_writer_rule():
    breakable = {r["id"] for r in REQUIREMENTS if r["role"] == "writer" and r["level"] != "MAY"}
    assert {m["requirement"] for m in MUTANTS["mutants"]} == breakable
    for m in MUTANTS["mutants"]:
        assert isinstance(m["args"], list) and ("fault" in m) != ("library" in m), m["name"]
        assert m.get("writer", "c") in ("c", "rust") and (m.get("writer", "c") == "c" or "fault" in m), m["name"]


def mutant_arches(m):
    """The Rust-style writer is built for x86-64 only (rustc's standard library is installed for the host)."""
    return ("x86_64",) if m.get("writer") == "rust" else tuple(ARCHES)


@pytest.mark.parametrize("arch", ARCHES)
def test_every_mutant_is_built(arch):
    for m in MUTANTS["mutants"]:
        if arch not in mutant_arches(m):
            continue
        mutant_program(arch, m["name"])
        need(package_fixture_program(PACKAGE, LIBRARY, arch, m["name"]))


# Symbol mutants: readelf shows them, on both arches.

def _not_exported(library, arch):
    hidden = symbol(library, ".symtab")
    return symbol(library, ".dynsym") is None and hidden is not None and hidden.bind == "LOCAL"


def _not_tls(library, arch):
    exported = symbol(library, ".dynsym")
    return exported is not None and exported.type == "OBJECT"


def _size_16(library, arch):
    exported = symbol(library, ".dynsym")
    return exported is not None and exported.size == 16


def _local_dynamic(library, arch):
    found = tls_relocations(library, arch)
    return not any(naming_symbol(found, kind) for kind in found) and any(r.symbol == "" for r in found["descriptor"])


def _legacy_dialect(library, arch):
    found = tls_relocations(library, arch)
    return "descriptor" not in found and bool(naming_symbol(found, "module")) and bool(naming_symbol(found, "module_offset"))


SYMBOL_SIGNS = {"symbol-not-exported": _not_exported, "symbol-not-tls": _not_tls, "symbol-size-16": _size_16,
                "local-dynamic": _local_dynamic, "general-dynamic": _legacy_dialect}


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("name", sorted(SYMBOL_SIGNS))
def test_symbol_mutant_shows_in_readelf(name, arch):
    sign = SYMBOL_SIGNS[name]
    assert sign(need(package_fixture_program(PACKAGE, LIBRARY, arch, name)), arch)
    assert not sign(holder_path(arch, "tlsdesc"), arch), "the reference shows the sign too"


# Runtime mutants: what a reader stopping the process sees (natively), checked absent from the reference run
# with the same arguments.

def _hold_sign(check):
    def sign(w):
        threads = w.wait_ready()
        return check(w, threads, *w.snapshot(threads))
    return sign


def _observed(check):
    def sign(w):
        threads = w.wait_ready()
        return w.observe(threads, check)
    return sign


def _valid_records(records):
    return [(i, r) for i, r in records.items() if r is not None and r.valid == 1]


def _journaled(w, index):
    return next(r for r in w.journal("record") if r["index"] == index)


def _key_map_reordered(w):
    w.wait_ready()
    w.wait_journal("key_map", 2)
    return w.context()[KEY_MAP_KEY][0] != INITIAL_KEYS[0]


def _swapped_and_flipped(w):
    threads = w.wait_ready()
    pointers, invalid = set(), False
    for _ in range(OBSERVATIONS):
        records, _ = w.snapshot(threads)
        pointers |= {(i, r.address) for i, r in records.items() if r is not None}
        invalid |= any(r is not None and r.valid == 0 for r in records.values())
        if invalid and len(pointers) > len(threads):
            return True
        time.sleep(OBSERVATION_GAP_S)
    return False


def _keys_in_resource(w):
    w.wait_ready()
    found = context_mappings(w.pid)
    read = consistent_read(w.pid, found[0].start, 1000)
    assert read is not None, "no consistent read of the process context"
    decoded = process_context(read[1])
    resource = dict(decoded["resource"] or [])
    attributes = dict(decoded["attributes"])
    return all(k in resource and k not in attributes for k in (SCHEMA_VERSION_KEY, KEY_MAP_KEY))


def _span_number(record):
    return int.from_bytes(record.span_id[4:], "big")


def _updated_in_place_on_switch(w):
    """An odd span and the next one seen in one record (same address): the record was rewritten in place at the
    switch. A pointer-swap writer builds span n + 1 while span n's record is still published: never the same."""
    threads = w.wait_ready()
    seen = {}  # (index, address) -> span numbers seen there
    for _ in range(OBSERVATIONS * 2):
        records, _ = w.snapshot(threads)
        for i, r in records.items():
            if r is None or r.valid != 1:
                continue
            spans = seen.setdefault((i, r.address), set())
            spans.add(_span_number(r))
            if any(n % 2 == 1 and n + 1 in spans for n in spans):
                return True
        time.sleep(OBSERVATION_GAP_S / 3)
    return False


def _stale_after_detach(w):
    threads = w.wait_ready()
    w.wait_journal("idle", len(threads))
    records, _ = w.snapshot(threads)
    return bool(_valid_records(records))


RUNTIME_SIGNS = {
    "no-schema-version": _hold_sign(lambda w, t, records, context: SCHEMA_VERSION_KEY not in context),
    "key-map-as-string": _hold_sign(lambda w, t, records, context: isinstance(context.get(KEY_MAP_KEY), str)),
    "key-map-reordered": _key_map_reordered,
    "key-before-map": _observed(lambda records, context: any(
        key >= len(context[KEY_MAP_KEY]) for _, r in _valid_records(records) for key, _ in r.entries()[0])),
    "key-outside-map": _hold_sign(lambda w, t, records, context: any(
        key >= len(context[KEY_MAP_KEY]) for _, r in _valid_records(records) for key, _ in r.entries()[0])),
    "size-big-endian": _hold_sign(lambda w, t, records, context: all(
        r.size != _journaled(w, i)["attrs_data_size"] == _byte_swapped(r.size) for i, r in records.items())),
    "valid-2": _hold_sign(lambda w, t, records, context: all(r.valid == 2 for r in records.values())),
    # Odd spans are sampled (span_ids): their records must carry 0x01.
    "flags-zero": _observed(lambda records, context: any(
        r.flags == 0 and int.from_bytes(r.span_id[4:], "big") % 2 == 1 for _, r in _valid_records(records))),
    "flags-never-set": _observed(lambda records, context: any(
        r.flags == 0 and int.from_bytes(r.span_id[4:], "big") % 2 == 1 for _, r in _valid_records(records))),
    "keys-in-resource": _keys_in_resource,
    "rust-swap-and-update": _updated_in_place_on_switch,
    "only-trace-id": _hold_sign(lambda w, t, records, context: all(
        r.trace_id != bytes(16) and r.span_id == bytes(8) for r in records.values())),
    "entry-overruns-size": _hold_sign(lambda w, t, records, context: all(
        r.entries()[1] > 0 for r in records.values())),
    "utf8-cut": _hold_sign(lambda w, t, records, context: any(
        not _decodes(value) for r in records.values() for _, value in r.entries()[0])),
    "misaligned-record": _hold_sign(lambda w, t, records, context: all(r.address % 2 for r in records.values())),
    "oversized-record": _hold_sign(lambda w, t, records, context: all(
        RECORD_HEADER.size + r.size > RECOMMENDED_MAX for r in records.values())),
    "pointer-before-record": _observed(lambda records, context: any(
        not ids_agree(r) for _, r in _valid_records(records))),
    "in-place-without-flip": _observed(lambda records, context: any(
        not ids_agree(r) for _, r in _valid_records(records))),
    "swap-and-flip": _swapped_and_flipped,
    "size-before-bytes": _observed(lambda records, context: any(
        entry not in expected_entries(i, appended=True) for i, r in _valid_records(records) for entry in r.entries()[0])),
    "stale-after-detach": _stale_after_detach,
    "written-by-another-thread": _observed(lambda records, context: any(
        r.span_id != span_ids(i, 1)[1] for i, r in records.items() if r is not None)),
}


def _byte_swapped(u16):
    return int.from_bytes(u16.to_bytes(2, "little"), "big")


def _decodes(value):
    try:
        value.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_every_mutant_has_an_outside_sign():
    assert set(SYMBOL_SIGNS) | set(RUNTIME_SIGNS) == {m["name"] for m in MUTANTS["mutants"]}


def mutant_args(name):
    return next(m["args"] for m in MUTANTS["mutants"] if m["name"] == name)


@host_only
@pytest.mark.parametrize("name", sorted(RUNTIME_SIGNS))
def test_runtime_mutant_breaks_its_rule_visibly(name, writers):
    mutant = next(m for m in MUTANTS["mutants"] if m["name"] == name)
    own_reference = model_program(HOST_ARCH, "rust-cdylib") if mutant.get("writer") == "rust" else reference()
    assert RUNTIME_SIGNS[name](writers(HOST_ARCH, mutant_program(HOST_ARCH, name), mutant_args(name))), name
    assert not RUNTIME_SIGNS[name](writers(HOST_ARCH, own_reference, mutant_args(name))), \
        f"the reference run with {name}'s arguments shows its sign"
