"""Type stubs for tracecorr._tracecorr (thin pybind11 bindings over libtracecorr's engine).

Each protocol package's bindings are the submodule named after it: its stub is the file of that name
beside this one.
"""
import datetime
import enum
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

HAVE_BPF: bool

class TracecorrError(RuntimeError):
    what: str
    where: str
    requirement: str

# ---- registry -------------------------------------------------------------------
class Level(enum.Enum):
    MUST: int
    SHOULD: int
    MAY: int

class Role(enum.Enum):
    AGENT: int
    PROFILER: int

class Requirement:
    id: str
    level: Level
    area: str
    role: Role
    source: str
    summary: str

class ProtocolSpec:
    id: str
    title: str
    requirements: List[Requirement]
    registry_json: str

def protocols() -> List[ProtocolSpec]: ...
def find_protocol(id: str) -> Optional[ProtocolSpec]: ...
def requirements() -> List[Requirement]: ...
def find_requirement(id: str) -> Optional[Requirement]: ...
def validate_ids(ids: Sequence[str]) -> List[str]: ...

# ---- ids ---------------------------------------------------------------------------
def to_hex(data: bytes) -> str: ...
def from_hex(hex: str, size: int) -> bytes: ...
def base64url_nopad(data: bytes) -> str: ...
def base64url_decode(text: str) -> Optional[bytes]: ...
def base64url_problem(text: str) -> str: ...
def utf8_invalid_at(data: bytes) -> Optional[int]: ...

# ---- processes ------------------------------------------------------------------------------
def inspect_process(pid: int, read_threads: bool = True, check_socket_reachable: bool = True,
                    protocol: str = "") -> Dict[str, Any]: ...

class SendOutcome(enum.Enum):
    SENT: int
    WOULD_BLOCK: int
    REFUSED: int

class AgentSocket:
    @staticmethod
    def connect(pid: int, path: str) -> AgentSocket: ...
    def send(self, datagram: bytes) -> SendOutcome: ...
    last_errno: int
    fd: int
    closed: bool
    def close(self) -> None: ...
    def __enter__(self) -> AgentSocket: ...
    def __exit__(self, *args: Any) -> None: ...

class Target:
    @staticmethod
    def launch(argv: Sequence[str], env: Dict[str, str] = ..., unset_env: Sequence[str] = ...) -> Target: ...
    @staticmethod
    def attach(pid: int) -> Target: ...
    pid: int
    launched: bool
    def alive(self) -> bool: ...
    def exit_description(self) -> Optional[str]: ...
    def stop(self, grace: float = 2.0) -> str: ...
    def output(self) -> bytes: ...
    def description(self) -> str: ...
    def processes(self) -> list[Any]: ...
    def release(self) -> None: ...

# ---- OTLP --------------------------------------------------------------------------------------
AttributeValue = Union[None, str, bool, int, float, bytes, List[Any]]

class ReceivedSpan:
    trace_id: bytes
    span_id: bytes
    parent_span_id: Optional[bytes]
    trace_state: str
    name: str
    kind: str
    start_unix_nano: int
    end_unix_nano: int
    flags: int
    sampled: bool
    attributes: Dict[str, AttributeValue]
    resource_attributes: Dict[str, AttributeValue]
    dropped_attributes_count: int
    status_code: int
    status_message: str
    scope_name: str
    scope_version: str
    received_at: datetime.datetime
    request_index: int
    def attribute(self, key: str) -> AttributeValue: ...
    def attribute_type(self, key: str) -> Optional[str]: ...
    def resource_attribute(self, key: str) -> AttributeValue: ...

class OtlpReceiver:
    @staticmethod
    def start(host: str = "127.0.0.1", port: int = 0) -> OtlpReceiver: ...
    endpoint: str
    traces_url: str
    port: int
    closed: bool
    def spans(self) -> List[ReceivedSpan]: ...
    def find_span(self, span_id: bytes) -> Optional[ReceivedSpan]: ...
    def counters(self) -> Dict[str, Any]: ...
    def wait_for(self, predicate: Callable[[List[ReceivedSpan]], bool], timeout: float) -> bool: ...
    def clear(self) -> None: ...
    def close(self) -> None: ...

# ---- OTLP profiles (when built with gRPC and cpp-httplib) ---------------------------------------
HAVE_PROFILES: bool

class ProfileSample:
    time_unix_nano: Optional[int]
    clock: Optional[str]
    value: int
    pid: Optional[int]
    tid: Optional[int]
    trace_id: Optional[bytes]
    span_id: Optional[bytes]
    trace_flags: Optional[int]
    attributes: Dict[str, Any]
    resource: Dict[str, Any]
    stack: List[int]
    profile: Optional[Dict[str, Any]]
    source: str
    export_index: int

class ProfilesReceiver:
    @staticmethod
    def start(protocol: str = "grpc", host: str = "127.0.0.1", port: int = 0) -> ProfilesReceiver: ...
    endpoint: str
    port: int
    protocol: str
    closed: bool
    def samples(self) -> List[ProfileSample]: ...
    def exports(self) -> List[Dict[str, Any]]: ...
    def counters(self) -> Dict[str, int]: ...
    def wait_for(self, predicate: Callable[[List[ProfileSample]], bool], timeout: float) -> bool: ...
    def clear(self) -> None: ...
    def close(self) -> None: ...

# ---- record layouts and samplers ----------------------------------------------------------------
RECORD_MAX_BYTES: int

class RecordLayout:
    name: str
    max_size: int
    valid_offset: int
    fixed_part: int
    in_tls_slot: bool
    def __init__(self, name: str, *, fixed_size: Optional[int] = None,
                 size_field: Optional[Tuple[int, int, int]] = None, max_size: int = ..., valid_offset: int,
                 valid_values: Optional[Sequence[int]] = None, presence_offset: Optional[int] = None,
                 fields: Sequence[Tuple[str, int, int]] = ..., memory_area_pointer_offset: Optional[int] = None) -> None: ...
    def record_length(self, first_bytes: bytes) -> int: ...

class TlsVariable:
    model: str
    dynamic: bool
    c_library: str
    module_id: Optional[int]
    offset: int
    explanation: str

def resolve_tls_variable(pid: int, *, library_regex: str, tls_symbol: str,
                         look_in_executables: bool = False) -> TlsVariable: ...

class Sampler:
    name: str
    def track(self, pid: int, layout: RecordLayout, *, tls_offset: Optional[int] = None,
              area_address: Optional[int] = None, tls_variable: Optional[TlsVariable] = None) -> None: ...
    def track_process_context(self, pid: int, header_address: Optional[int]) -> None: ...
    def untrack(self, pid: int) -> None: ...
    def poll(self, timeout: float) -> List[Dict[str, Any]]: ...
    def counters(self) -> Dict[str, int]: ...

def make_ptrace_sampler(frequency_hz: int = 99) -> Sampler: ...
def make_bpf_sampler(frequency_hz: int = 99, ringbuf_bytes: int = ...) -> Sampler: ...  # only when HAVE_BPF
def sample_records(sampler: Sampler, pids: List[int], duration: float) -> Dict[str, Any]: ...
# ---- conformance results and reports ---------------------------------------------------------------
class Verdict(enum.Enum):
    PASS: int
    FAIL: int
    WARN: int
    SKIP: int
    ERROR: int

class ExpectationStatus(enum.Enum):
    NONE: int
    EXPECTED_FAILURE: int
    UNEXPECTED_PASS: int
    NOT_EVALUATED: int

class DecodedField:
    offset: int
    size: int
    name: str
    value: str
    def __init__(self) -> None: ...

class Evidence:
    label: str
    expected: str
    actual: str
    bytes: bytes
    fields: List[DecodedField]
    def __init__(self) -> None: ...

class RequirementResult:
    id: str
    protocol: str
    level: Level
    role: Role
    words: str
    area: str
    source: str
    verdict: Verdict
    reason: str
    evidence: List[Evidence]
    evidence_count: int
    evidence_minimum: int
    probe: str
    duration: datetime.timedelta
    repeat_command: str
    expectation: ExpectationStatus
    expectation_reason: str

class ProtocolRun:
    id: str
    named: bool
    chosen_by: str
    not_applicable: str
    def __init__(self) -> None: ...

class TargetDescription:
    description: str
    pid: Optional[int]
    arch: str
    def __init__(self) -> None: ...

class ExpectationOutcome:
    id: str
    reason: str
    status: ExpectationStatus

class RunResult:
    tool_version: str
    schema_version: str
    target: TargetDescription
    protocol: str
    protocols: List[ProtocolRun]
    only: List[str]
    notes: List[str]
    personality: str
    strict: bool
    started: datetime.datetime
    finished: datetime.datetime
    results: List[RequirementResult]
    expectations: List[ExpectationOutcome]
    counters: Dict[str, int]
    def __init__(self) -> None: ...
    def add_result(self, result: RequirementResult) -> None: ...
    def result(self, id: str) -> Optional[RequirementResult]: ...

def make_result(id: str) -> RequirementResult: ...
def judge(level: Level, met: bool, strict: bool = False) -> Verdict: ...
def apply_level(result: RequirementResult, strict: bool = False) -> None: ...
def fails_gate(result: RequirementResult, strict: bool = False) -> bool: ...
def summarize(run: RunResult) -> Dict[str, int]: ...
def summary_line(run: RunResult) -> str: ...
def exit_code(run: RunResult, strict: bool = False) -> int: ...
def unjudged(run: RunResult) -> List[str]: ...
def protocols_of(run: RunResult) -> List[ProtocolRun]: ...
def protocol_status(run: RunResult, protocol: ProtocolRun) -> str: ...
def results_of(run: RunResult, protocol: str) -> List[RequirementResult]: ...
def render_console(run: RunResult, color: bool = False, show_passes: bool = True) -> str: ...
def render_junit(run: RunResult) -> str: ...
def render_json(run: RunResult) -> str: ...
def write_text_file(path: str, text: str) -> None: ...
def apply_expectations_file(run: RunResult, path: str) -> None: ...
def selected_requirements(only: Sequence[str] = ..., protocol: str = "") -> List[str]: ...
def run_conformance(command: Sequence[str] = ..., pid: Optional[int] = None, only: Sequence[str] = ...,
                    strict: bool = False, personality: str = "spec", time_scale: float = 1.0, gdbstub: str = "",
                    otlp_port: int = 0, quiet: bool = True, protocol: str = "",
                    options: Dict[str, str] = ...) -> RunResult: ...
