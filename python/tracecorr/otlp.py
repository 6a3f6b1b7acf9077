"""The OTLP/HTTP receiver an agent under test exports its spans to."""
from __future__ import annotations

from typing import Callable, List, Optional, Union

from . import _tracecorr
from ._receiver import NativeReceiver
from . import protocol as _protocol
from ._tracecorr import ReceivedSpan

__all__ = ["OtlpReceiver", "ReceivedSpan"]

IdLike = Union[bytes, str]

# A protocol's attribute helpers live in its package; the ones that lived here still resolve.
__getattr__ = _protocol.forwarder(__name__)


def _id(value: IdLike, size: int) -> bytes:
    return _tracecorr.from_hex(value, size) if isinstance(value, str) else bytes(value)


class OtlpReceiver(NativeReceiver):
    """An OTLP/HTTP trace receiver on ``host``:``port`` (0: ephemeral). Context manager; closed on exit.

    Spans come back as :class:`ReceivedSpan` (ids as bytes, attributes as
    Python values). Waiting releases the GIL.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0):
        self._native = _tracecorr.OtlpReceiver.start(host, port)

    @property
    def endpoint(self) -> str:
        """``http://HOST:PORT`` for OTEL_EXPORTER_OTLP_ENDPOINT."""
        return self._native.endpoint

    def spans(self) -> List[ReceivedSpan]:
        """Every span received so far (a snapshot)."""
        return self._native.spans()

    def find(self, trace_id: Optional[IdLike] = None, span_id: Optional[IdLike] = None) -> Optional[ReceivedSpan]:
        """The first span matching the given ids (hex or bytes), or None."""
        t = _id(trace_id, 16) if trace_id is not None else None
        s = _id(span_id, 8) if span_id is not None else None
        if s is not None and t is None:
            return self._native.find_span(s)
        for span in self.spans():
            if (t is None or span.trace_id == t) and (s is None or span.span_id == s):
                return span
        return None

    def attribute(self, span: ReceivedSpan, name: str):
        """``span.attribute(name)``: the value, or None."""
        return span.attribute(name)

    def counters(self) -> dict:
        return self._native.counters()

    def wait_for(self, predicate: Callable[[List[ReceivedSpan]], bool], timeout: float) -> bool:
        """Blocks until ``predicate(spans)`` holds or ``timeout`` seconds pass; returns whether it held.
        The predicate must not call back into the receiver."""
        return self._native.wait_for(predicate, timeout)

    def wait_for_span(self, trace_id: IdLike, span_id: IdLike, timeout: float) -> Optional[ReceivedSpan]:
        """The span with these ids once it has arrived, or None after ``timeout`` seconds."""
        t, s = _id(trace_id, 16), _id(span_id, 8)
        found: list = []

        def arrived(spans):
            for span in spans:
                if span.trace_id == t and span.span_id == s:
                    found.append(span)
                    return True
            return False

        return found[0] if self.wait_for(arrived, timeout) else None

    def wait_for_transaction(self, trace_id: IdLike, transaction_id: IdLike, timeout: float) -> Optional[ReceivedSpan]:
        """The transaction (the span whose id is ``transaction_id``) once exported, or None after ``timeout``."""
        return self.wait_for_span(trace_id, transaction_id, timeout)
