"""Helpers shared by the scenarios (ids, waiting on records and exports)."""
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
try:
    import tracecorr  # installed
except ImportError:  # in-tree: the CMake build writes the extension into python/tracecorr/
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr

from tracecorr import _tracecorr  # noqa: E402

from build_products import HOST_ARCH as ARCH, fixture_program

FIXTURE = fixture_program(ARCH)
WAIT_S = 15.0  # bound on waiting for an export: a missing span fails the test, it never slows a pass


def stack_id(n: int) -> bytes:
    """A recognisable 16-byte stack trace id (scenario number in the first byte, n in the last)."""
    return bytes([0x5c]) + bytes(13) + n.to_bytes(2, "big")


def b64(stack: bytes) -> str:
    return _tracecorr.base64url_nopad(stack)


def active_transaction(target, exclude=()):
    """(trace_id, transaction_id) hex of a transaction running on one of the target's threads now."""
    record = target.wait_for_records(timeout=WAIT_S, exclude_transactions=exclude)[0]
    return record["trace_id"], record["transaction_id"]


def wait_until_ended(target, transaction_id: str, timeout: float = WAIT_S) -> None:
    """Polls the threads' records until no thread is inside `transaction_id` any more."""
    deadline = time.monotonic() + timeout
    while any(r["transaction_id"] == transaction_id for r in target.active_records()):
        assert time.monotonic() < deadline, f"transaction {transaction_id} still active after {timeout} s"
        time.sleep(0.005)


def exported_ids(receiver, trace_id: str, transaction_id: str) -> list:
    """The stack trace ids the exported transaction carries (waits for the export; fails if it never comes)."""
    span = receiver.wait_for_transaction(trace_id, transaction_id, WAIT_S)
    assert span is not None, f"transaction {transaction_id} of trace {trace_id} was not exported within {WAIT_S} s"
    name = tracecorr.elastic_v1.attribute_name()
    value = span.attribute(name)
    if value is None:
        return []
    assert span.attribute_type(name) == "string-array", f"{name} is {span.attribute_type(name)}"
    return value
