"""The agent process under test: launched with the standard environment, or attached to."""
from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from typing import Mapping, Optional, Sequence, Union

from . import _tracecorr

__all__ = ["Target", "standard_env"]


def standard_env(endpoint: Optional[str], socket_dir: Optional[str], enabled: Optional[str] = "true",
                 batch_delay_ms: int = 50) -> dict:
    """The environment ``tracecorr conform`` launches agents with: OTLP exporter to ``endpoint``,
    correlation ``enabled``, the socket in ``socket_dir`` and a short batch delay."""
    spec = _tracecorr.spec
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": str(batch_delay_ms),
    }
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    if enabled is not None:
        env[spec.kEnvEnabled] = enabled
    if socket_dir:
        env[spec.kEnvSocketDir] = socket_dir
    return env


class Target:
    """A launched or attached agent process.

    ``Target(cmd, receiver=rx)`` launches ``cmd`` (a list, or a shell-like string
    split with :func:`shlex.split`) with :func:`standard_env` pointing at
    ``rx.endpoint`` and a fresh socket directory; ``Target.attach(pid)`` uses a
    running process. As a context manager the target is stopped (launched) or
    left alone (attached) on exit.
    """

    def __init__(self, cmd: Union[str, Sequence[str]], receiver=None, *, env: Optional[Mapping[str, str]] = None,
                 unset_env: Sequence[str] = (), enabled: Optional[str] = "true", socket_dir: Optional[str] = None,
                 args: Sequence[str] = ()):
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        argv += list(args)
        self._own_socket_dir = socket_dir is None
        self.socket_dir = socket_dir or tempfile.mkdtemp(prefix="tracecorr-py-sock-")
        os.chmod(self.socket_dir, 0o755)
        self.receiver = receiver
        full_env = standard_env(receiver.endpoint if receiver is not None else None, self.socket_dir, enabled)
        full_env.update(env or {})
        for name in unset_env:
            full_env.pop(name, None)
        self.argv = argv
        self.stopped_by_request = False
        self._native = _tracecorr.Target.launch(argv, full_env, list(unset_env))

    @classmethod
    def attach(cls, pid: int, receiver=None) -> "Target":
        """A running process (not stopped when released). ``receiver``: where it exports, if ours."""
        self = cls.__new__(cls)
        self._own_socket_dir = False
        self.socket_dir = None
        self.receiver = receiver
        self.argv = []
        self.stopped_by_request = False
        self._native = _tracecorr.Target.attach(pid)
        return self

    # ---- state -------------------------------------------------------------------
    @property
    def pid(self) -> int:
        return self._native.pid

    @property
    def launched(self) -> bool:
        return self._native.launched

    def alive(self) -> bool:
        return self._native.alive()

    def exit_description(self) -> Optional[str]:
        return self._native.exit_description()

    def output(self) -> str:
        """stdout and stderr captured so far (launched targets), decoded leniently."""
        return self._native.output().decode("utf-8", "replace")

    def description(self) -> str:
        return self._native.description()

    # ---- inspection --------------------------------------------------------------------
    def inspect(self, read_threads: bool = True, check_socket_reachable: bool = True) -> dict:
        """The ``tracecorr inspect --json`` document for this process: one member per protocol,
        ``"elastic-v1"`` (library, storage, socket, threads) and ``"otel-process-context"``
        (every ``OTEL_CTX`` mapping with its header, read and decoded resource and attributes)."""
        return _tracecorr.inspect_process(self.pid, read_threads, check_socket_reachable)

    def process_context(self) -> dict:
        """The process context part of :meth:`inspect` (OTEP 4719): ``mappings`` (each with
        ``header``, ``read`` and ``payload``: ``resource`` and ``attributes`` as lists of
        ``{"key", "type", "value"}``) and the ``findings`` of the writer rules one look can judge."""
        return _tracecorr.inspect_process(self.pid, False, False)["otel-process-context"]

    def wait_ready(self, timeout: float = 10.0, poll: float = 0.05) -> dict:
        """Waits until the process storage is published and names a socket; returns that inspection.

        Raises TimeoutError (with the last inspection's findings) when it does not happen in time.
        """
        deadline = time.monotonic() + timeout
        last: Optional[dict] = None
        error: Optional[Exception] = None
        while True:
            try:
                last = self.inspect(read_threads=False, check_socket_reachable=False)["elastic-v1"]
                storage = last.get("storage") or {}
                if storage.get("published") and storage.get("socket_file_path"):
                    return last
            except _tracecorr.TracecorrError as e:
                error = e
            if not self.alive():
                raise RuntimeError(f"{self.description()} ended ({self.exit_description()}) before it was ready:\n"
                                   f"{self.output()}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.description()}: no process storage with a socket path after {timeout} s "
                                   f"(last inspection: {last and last.get('findings')}, error: {error})")
            time.sleep(poll)

    def socket_path(self) -> str:
        """socket_file_path from the published process storage (as the process sees it)."""
        storage = (self.inspect(read_threads=False, check_socket_reachable=False)["elastic-v1"].get("storage") or {})
        path = storage.get("socket_file_path")
        if not path:
            raise RuntimeError(f"{self.description()} has not published a socket path")
        return path

    def active_records(self) -> list:
        """The records of threads that are inside a trace right now (valid and trace_present), as dicts
        with ``tid``, ``trace_id``, ``span_id``, ``transaction_id`` (hex)."""
        out = []
        for t in self.inspect(check_socket_reachable=False)["elastic-v1"].get("threads", []):
            r = t.get("record")
            if r and r.get("valid") and r.get("trace_present"):
                out.append(dict(r, tid=t["tid"]))
        return out

    def wait_for_records(self, timeout: float = 10.0, poll: float = 0.02, exclude_transactions=()) -> list:
        """Waits until at least one thread is inside a trace (optionally: a transaction not in
        ``exclude_transactions``); returns :meth:`active_records`. TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        excluded = set(exclude_transactions)
        while True:
            records = [r for r in self.active_records() if r["transaction_id"] not in excluded]
            if records:
                return records
            if not self.alive():
                raise RuntimeError(f"{self.description()} ended ({self.exit_description()})")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.description()}: no thread published an active trace within {timeout} s")
            time.sleep(poll)

    # ---- lifetime ------------------------------------------------------------------------
    def stop(self, grace: float = 2.0) -> str:
        """SIGTERM, then SIGKILL after ``grace`` seconds (launched targets). Returns how it ended."""
        self.stopped_by_request = True
        return self._native.stop(grace)

    def close(self) -> None:
        """Stops a launched target, leaves an attached one alone, removes our socket directory."""
        if self._native is not None:
            self._native.release()
        if self._own_socket_dir and self.socket_dir:
            shutil.rmtree(self.socket_dir, ignore_errors=True)
            self._own_socket_dir = False

    def __enter__(self) -> "Target":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tracecorr.Target {self.description()}>"
