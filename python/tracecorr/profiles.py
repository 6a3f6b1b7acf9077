"""The OTLP profiles receiver a profiler (or ``tracecorr agent --otlp-endpoint``) exports to."""
from __future__ import annotations

from typing import Callable, List

from . import _tracecorr
from ._receiver import NativeReceiver

__all__ = ["HAVE_PROFILES", "ProfilesReceiver", "ProfileSample"]

HAVE_PROFILES: bool = _tracecorr.HAVE_PROFILES
if HAVE_PROFILES:
    from ._tracecorr import ProfileSample
else:  # built without gRPC or cpp-httplib: nothing to receive with
    ProfileSample = None  # type: ignore[assignment,misc]


class ProfilesReceiver(NativeReceiver):
    """An OTLP profiles receiver on ``host``:``port`` (0: ephemeral) speaking ``protocol``: ``"grpc"``
    (``ProfilesService/Export``) or ``"http/protobuf"`` (``POST /v1development/profiles``). Context
    manager; closed on exit.

    Samples come back as :class:`ProfileSample`, one per observation (aggregated OTLP samples
    unfolded): ``pid``, ``tid``, ``time_unix_nano``, ``trace_id``/``span_id`` (bytes, None without a
    link), ``attributes`` and ``resource`` (dicts of Python values), ``stack``. Waiting releases the GIL.
    """

    def __init__(self, protocol: str = "grpc", host: str = "127.0.0.1", port: int = 0):
        if not HAVE_PROFILES:
            raise RuntimeError("this tracecorr was built without OTLP profiles (libgrpc++-dev, libcpp-httplib-dev)")
        self._native = _tracecorr.ProfilesReceiver.start(protocol, host, port)

    @property
    def endpoint(self) -> str:
        """``http://HOST:PORT`` for OTEL_EXPORTER_OTLP_ENDPOINT (with OTEL_EXPORTER_OTLP_PROTOCOL = ``protocol``)."""
        return self._native.endpoint

    @property
    def protocol(self) -> str:
        return self._native.protocol

    def samples(self) -> List["ProfileSample"]:
        """Every sample of every accepted export so far (a snapshot)."""
        return self._native.samples()

    def exports(self) -> List[dict]:
        """Every export received, accepted or not: index, source, peer, bytes, profiles, samples, outcome, message."""
        return self._native.exports()

    def counters(self) -> dict:
        """``exports``, one count per outcome (``accepted``, ``refused``, ``malformed``, ...), ``samples``."""
        return self._native.counters()

    def wait_for(self, predicate: Callable[[List["ProfileSample"]], bool], timeout: float) -> bool:
        """Blocks until ``predicate(samples)`` holds or ``timeout`` seconds pass; returns whether it held.
        The predicate must not call back into the receiver."""
        return self._native.wait_for(predicate, timeout)
