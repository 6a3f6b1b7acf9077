"""Elastic v1's datagrams a profiler sends, built with the C++ encoders.

Building and decoding are libtracecorr's (``_tracecorr.elastic_v1.encode`` and
``decode_message``); cutting bytes off
(:func:`truncate`) and changing a field of an already encoded message
(:func:`mutate`: decode, set, encode again) are conveniences on top.

Ids are ``bytes`` (trace 16, transaction 8, stack trace 16) or their hex text.
"""
from __future__ import annotations

from typing import Union

from .._tracecorr import elastic_v1 as _native
from .._tracecorr import from_hex

Correlation, Registration, UnknownMessage = _native.Correlation, _native.Registration, _native.UnknownMessage

IdLike = Union[bytes, bytearray, str]
Message = Union[Registration, Correlation, UnknownMessage]

__all__ = ["correlation", "registration", "unknown", "decode", "truncate", "mutate", "minimum_size", "as_id"]


def as_id(value: IdLike, size: int) -> bytes:
    """``size`` bytes from bytes or hex text (ValueError otherwise)."""
    if isinstance(value, str):
        return from_hex(value, size)
    value = bytes(value)
    if len(value) != size:
        raise ValueError(f"expected {size} bytes, got {len(value)}")
    return value


def correlation_message(trace_id: IdLike, transaction_id: IdLike, stack_trace_id: IdLike, count: int = 1, *,
                        minor: int | None = None, trailing: bytes = b"") -> Correlation:
    """A :class:`Correlation` object (not yet encoded)."""
    m = Correlation()
    m.trace_id = as_id(trace_id, 16)
    m.transaction_id = as_id(transaction_id, 8)
    m.stack_trace_id = as_id(stack_trace_id, 16)
    m.count = count
    if minor is not None:
        m.minor = minor
    m.trailing = bytes(trailing)
    return m


def correlation(trace_id: IdLike, transaction_id: IdLike, stack_trace_id: IdLike, count: int = 1, *,
                minor: int | None = None, trailing: bytes = b"") -> bytes:
    """The encoded correlation datagram (type 1; minor defaults to the registry's current one)."""
    return _native.encode(correlation_message(trace_id, transaction_id, stack_trace_id, count,
                                                 minor=minor, trailing=trailing))


def registration_message(samples_delay_ms: int = 1000, host_id: Union[str, bytes] = "", *, minor: int = 2,
                         trailing: bytes = b"") -> Registration:
    """A :class:`Registration` object (not yet encoded)."""
    m = Registration()
    m.samples_delay_ms = samples_delay_ms
    m.host_id = host_id
    m.minor = minor
    m.trailing = bytes(trailing)
    return m


def registration(samples_delay_ms: int = 1000, host_id: Union[str, bytes] = "", *, minor: int = 2,
                 trailing: bytes = b"") -> bytes:
    """The encoded registration datagram (type 2)."""
    return _native.encode(registration_message(samples_delay_ms, host_id, minor=minor, trailing=trailing))


def unknown(message_type: int, minor: int = 1, payload: bytes = b"") -> bytes:
    """A datagram of an arbitrary type (MSG-05)."""
    m = UnknownMessage()
    m.type = message_type
    m.minor = minor
    m.payload = bytes(payload)
    return _native.encode(m)


def decode(datagram: bytes) -> Message:
    """Decodes as a conforming agent must (TracecorrError for a too-short message: MSG-04)."""
    return _native.decode_message(bytes(datagram))


def minimum_size(datagram_or_message: Union[bytes, Message]) -> int:
    """The smallest datagram carrying every field (the size without trailing bytes)."""
    m = decode(datagram_or_message) if isinstance(datagram_or_message, (bytes, bytearray)) else datagram_or_message
    return _native.minimum_size(m)


def truncate(datagram: bytes, n: int) -> bytes:
    """The first ``n`` bytes (``n`` may be negative: drop that many from the end)."""
    if n < 0:
        n = max(0, len(datagram) + n)
    return bytes(datagram[:n])


_ID_SIZES = {"trace_id": 16, "transaction_id": 8, "stack_trace_id": 16}


def mutate(datagram: bytes, **fields) -> bytes:
    """Decodes ``datagram``, sets ``fields`` (e.g. ``count=0``, ``minor=0``, ``trailing=b"x"``) and encodes again.

    Ids may be given as bytes or hex. Unknown field names are an AttributeError.
    """
    m = decode(datagram)
    for name, value in fields.items():
        if not hasattr(m, name):
            raise AttributeError(f"{type(m).__name__} has no field {name!r}")
        if name in _ID_SIZES:
            value = as_id(value, _ID_SIZES[name])
        setattr(m, name, value)
    return _native.encode(m)
