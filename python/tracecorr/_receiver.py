"""What the OTLP receivers' Python wrappers share: a native receiver, cleared, closed, a context manager."""
from __future__ import annotations

from typing import Any, TypeVar

_Receiver = TypeVar("_Receiver", bound="NativeReceiver")


class NativeReceiver:
    """Base of :class:`tracecorr.otlp.OtlpReceiver` and :class:`tracecorr.profiles.ProfilesReceiver`."""

    _native: Any

    @property
    def port(self) -> int:
        return self._native.port

    def clear(self) -> None:
        """Forgets what was received so far."""
        self._native.clear()

    def close(self) -> None:
        self._native.close()

    def __enter__(self: _Receiver) -> _Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
