"""A profiler's side of Elastic v1, driven from a test.

:class:`HostAgent` sends hand-made datagrams to one agent process (register,
correlations, raw bytes) and keeps a tally of what the kernel accepted, and can
run libtracecorr's reference host agent (BPF or ptrace sampler) against it.
"""
from __future__ import annotations

import collections
import threading
from typing import Optional, Union

from .. import _tracecorr
from .._tracecorr import SendOutcome
from .._tracecorr import elastic_v1 as _native
from ..sampling import make_sampler  # noqa: F401  (tracecorr.agent.make_sampler, its former home)
from . import messages
from .target import socket_path as published_socket_path

__all__ = ["HostAgent", "BackgroundSampling"]


class HostAgent:
    """Talks to one agent process's socket like a profiler.

    ``target`` is a :class:`tracecorr.Target` or a pid; the socket path comes
    from the process storage unless given. Every send is non-blocking and its
    :class:`SendOutcome` is tallied in :attr:`outcomes` (``SENT``,
    ``WOULD_BLOCK`` = lost to EAGAIN, ``REFUSED``) and in :attr:`sent`
    (the datagrams the kernel accepted, in order).
    """

    def __init__(self, target, socket_path: Optional[str] = None, *, connect: bool = True):
        self.pid = target if isinstance(target, int) else target.pid
        self._target = None if isinstance(target, int) else target
        self._socket_path = socket_path
        self._socket = None
        self.outcomes: collections.Counter = collections.Counter()
        self.sent: list = []
        if connect:
            self.connect()

    # ---- connection ----------------------------------------------------------------------
    @property
    def socket_path(self) -> str:
        if self._socket_path is None:
            self._socket_path = published_socket_path(self._target if self._target is not None else self.pid)
        return self._socket_path

    def connect(self) -> None:
        """Connects (again) to the agent's socket, resolved inside the process's root."""
        self.close()
        self._socket = _tracecorr.AgentSocket.connect(self.pid, self.socket_path)

    def reconnect(self) -> None:
        """A profiler restart: drop the connection, read the socket path anew and connect."""
        self._socket_path = None
        self.connect()

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None

    def __enter__(self) -> "HostAgent":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- sending ----------------------------------------------------------------------------
    def send_raw(self, datagram: bytes) -> SendOutcome:
        """Sends bytes as one datagram, never blocking."""
        if self._socket is None:
            raise RuntimeError("not connected")
        datagram = bytes(datagram)
        outcome = self._socket.send(datagram)
        self.outcomes[outcome] += 1
        if outcome == SendOutcome.SENT:
            self.sent.append(datagram)
        return outcome

    @property
    def last_errno(self) -> int:
        return self._socket.last_errno if self._socket is not None else 0

    def register(self, delay_ms: int = 1000, host_id: Union[str, bytes] = "", minor: int = 2,
                 trailing: bytes = b"") -> SendOutcome:
        """Sends a registration message (MSG-01) with samples-delay-ms and host-id."""
        return self.send_raw(messages.registration(delay_ms, host_id, minor=minor, trailing=trailing))

    def send_correlation(self, trace_id, transaction_id, stack_trace_id, count: int = 1, *,
                         minor: Optional[int] = None, trailing: bytes = b"") -> SendOutcome:
        """Sends one correlation message; ids as bytes or hex."""
        return self.send_raw(messages.correlation(trace_id, transaction_id, stack_trace_id, count,
                                                  minor=minor, trailing=trailing))

    # ---- the reference host agent ---------------------------------------------------------------
    def sample(self, duration: float, reader: str = "bpf", *, personality: str = "spec",
               samples_delay_ms: int = 1000, host_id: str = "", frequency_hz: int = 99,
               flush_interval: float = 0.25) -> dict:
        """Runs libtracecorr's host agent against this process for ``duration`` seconds.

        ``personality="spec"`` registers and aggregates counts per (trace,
        transaction, stack) until the transaction settles (its threads were seen
        elsewhere, or it went unsampled for ``flush_interval`` seconds);
        ``"ebpf-profiler"`` sends one message per sample (the OTel eBPF profiler's
        behaviour). The agent uses a connection of its own. Returns its summary
        (per transaction: ``stack_trace_ids`` {base64url: count sent},
        ``samples_sent``, ...; per process ``delivery``: what the agent read in
        time, late, unconfirmed, dropped, and the capacity bound).
        """
        sampler = make_sampler(reader, frequency_hz)
        agent = _native.HostAgent(sampler, [self.pid], samples_delay_ms=samples_delay_ms, host_id=host_id,
                                     personality=personality, frequency_hz=frequency_hz,
                                     flush_interval=flush_interval, duration=duration)
        agent.run()
        return agent.summary()

    def sample_in_background(self, reader: str = "bpf", **options) -> "BackgroundSampling":
        """Like :meth:`sample` without a duration: runs on a thread until the returned object is stopped."""
        return BackgroundSampling(self.pid, reader, **options)


class BackgroundSampling:
    """The reference host agent on a thread (GIL released while it runs). Context manager; ``stop()`` returns
    the summary."""

    def __init__(self, pid: int, reader: str = "bpf", *, personality: str = "spec", samples_delay_ms: int = 1000,
                 host_id: str = "", frequency_hz: int = 99, flush_interval: float = 0.25):
        self._sampler = make_sampler(reader, frequency_hz)
        self._agent = _native.HostAgent(self._sampler, [pid], samples_delay_ms=samples_delay_ms, host_id=host_id,
                                           personality=personality, frequency_hz=frequency_hz,
                                           flush_interval=flush_interval)
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="tracecorr-host-agent", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._agent.run()
        except BaseException as e:  # reported by stop()
            self.error = e

    def stop(self) -> dict:
        self._agent.stop()
        self._thread.join()
        if self.error is not None:
            raise self.error
        return self._agent.summary()

    def __enter__(self) -> "BackgroundSampling":
        return self

    def __exit__(self, *exc) -> None:
        if self._thread.is_alive():
            self._agent.stop()
            self._thread.join()
