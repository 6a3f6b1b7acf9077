"""Type stubs for tracecorr._tracecorr.elastic_v1 (Elastic v1's bindings: python/src/elastic_v1/)."""
from typing import Any, Dict, Sequence, Union

from . import RecordLayout, Sampler

class spec:
    kPointerSize: int
    kUtf8StrMaxLengthRead: int
    kTlsRecordSize: int
    kTlsRecordMinor: int
    kProcessStorageMinor: int
    kMessageHeaderSize: int
    kDefaultDelayMs: int
    kDefaultBufferSize: int
    kStackTraceIdSize: int
    kMsgCorrelationType: int
    kMsgCorrelationMinor: int
    kMsgCorrelationFixedSize: int
    kMsgRegistrationType: int
    kMsgRegistrationMinor: int
    kMsgRegistrationFixedSize: int
    kMsgRegistrationHostIdMaxLength: int
    kAttributeName: str
    kEnvEnabled: str
    kEnvSocketDir: str
    kEnvBufferSize: str
    kLibraryNameRegex: str
    kProcessStorageSymbol: str
    kTlsSymbol: str

# ---- records, storage and messages ------------------------------------------------------------------------------
class TlsRecord:
    minor: int
    valid: int
    trace_present: int
    trace_flags: int
    trace_id: bytes
    span_id: bytes
    transaction_id: bytes
    def __init__(self) -> None: ...

def encode_tls_record(record: TlsRecord) -> bytes: ...
def decode_tls_record(data: bytes) -> TlsRecord: ...

class ProcessStorage:
    minor: int
    service_name: str
    service_environment: str
    socket_file_path: str
    encoded_size: int
    def __init__(self) -> None: ...

def encode_process_storage(storage: ProcessStorage) -> bytes: ...
def decode_process_storage(data: bytes) -> ProcessStorage: ...

class Registration:
    minor: int
    samples_delay_ms: int
    host_id: bytes  # str accepted when setting
    trailing: bytes
    def __init__(self) -> None: ...

class Correlation:
    minor: int
    trace_id: bytes
    transaction_id: bytes
    stack_trace_id: bytes
    count: int
    trailing: bytes
    def __init__(self) -> None: ...

class UnknownMessage:
    type: int
    minor: int
    payload: bytes
    def __init__(self) -> None: ...

Message = Union[Registration, Correlation, UnknownMessage]

def encode(message: Message) -> bytes: ...
def decode_message(datagram: bytes) -> Message: ...
def minimum_size(message: Message) -> int: ...
def describe(message: Message) -> str: ...

def tls_record_layout() -> RecordLayout: ...


def stack_trace_id(frames: Sequence[int]) -> bytes: ...

class HostAgent:
    def __init__(self, sampler: Sampler, pids: Sequence[int] = ..., all: bool = False, samples_delay_ms: int = 1000,
                 host_id: str = "", personality: str = "spec", frequency_hz: int = 99,
                 flush_interval: float = 0.0, duration: float = 0.0) -> None: ...
    def run(self) -> None: ...
    def stop(self) -> None: ...
    def summary(self) -> Dict[str, Any]: ...

