"""The process under test: launched with the standard environment, or attached to.

What a protocol needs of the process (the environment that turns it on, when it has published, helpers
that read what it published) comes from the protocol's package (:mod:`tracecorr.protocol`).
"""
from __future__ import annotations

import os
import shlex
import shutil
import tempfile
import time
from typing import Mapping, Optional, Sequence, Union

from . import _tracecorr
from . import protocol as _protocol

__all__ = ["Target", "standard_env"]


def standard_env(endpoint: Optional[str], socket_dir: Optional[str], enabled: Optional[str] = "true",
                 batch_delay_ms: int = 50, *, protocol: Optional[str] = None) -> dict:
    """The environment ``tracecorr conform`` launches agents with: OTLP exporter to ``endpoint`` with a
    short batch delay, and what ``protocol`` (default: the first compiled in) needs: switched ``enabled``
    (None: left unset), its sockets in ``socket_dir``."""
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_BSP_SCHEDULE_DELAY": str(batch_delay_ms),
    }
    if endpoint:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    env.update(_protocol.package(protocol).launch_environment(enabled=enabled, socket_dir=socket_dir))
    return env


class Target:
    """A launched or attached agent process, of one protocol.

    ``Target(cmd, receiver=rx)`` launches ``cmd`` (a list, or a shell-like string
    split with :func:`shlex.split`) with :func:`standard_env` pointing at
    ``rx.endpoint`` and a fresh socket directory; ``Target.attach(pid)`` uses a
    running process. As a context manager the target is stopped (launched) or
    left alone (attached) on exit.

    ``protocol`` (an id; default: the first compiled in) picks the package that says what
    the process needs and has published (:attr:`protocol`); the package's target
    helpers are methods of the target (e.g. reading the records it published).
    """

    def __init__(self, cmd: Union[str, Sequence[str]], receiver=None, *, env: Optional[Mapping[str, str]] = None,
                 unset_env: Sequence[str] = (), enabled: Optional[str] = "true", socket_dir: Optional[str] = None,
                 args: Sequence[str] = (), protocol: Optional[str] = None):
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        argv += list(args)
        self.protocol = _protocol.package(protocol)
        self._own_socket_dir = socket_dir is None
        self.socket_dir = socket_dir or tempfile.mkdtemp(prefix="tracecorr-py-sock-")
        os.chmod(self.socket_dir, 0o755)
        self.receiver = receiver
        full_env = standard_env(receiver.endpoint if receiver is not None else None, self.socket_dir, enabled,
                                protocol=self.protocol.id)
        full_env.update(env or {})
        for name in unset_env:
            full_env.pop(name, None)
        self.argv = argv
        self.stopped_by_request = False
        self._native = _tracecorr.Target.launch(argv, full_env, list(unset_env))

    @classmethod
    def attach(cls, pid: int, receiver=None, protocol: Optional[str] = None) -> "Target":
        """A running process (not stopped when released). ``receiver``: where it exports, if ours."""
        self = cls.__new__(cls)
        self.protocol = _protocol.package(protocol)
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
        """The ``tracecorr inspect --json`` document of this target's protocol for this process."""
        return _tracecorr.inspect_process(self.pid, read_threads, check_socket_reachable, self.protocol.id)

    def wait_ready(self, timeout: float = 10.0, poll: float = 0.05) -> dict:
        """Waits until the process has published what its protocol publishes; returns that inspection.

        Raises TimeoutError (with what is missing and the last inspection's findings) when it does not
        happen in time.
        """
        deadline = time.monotonic() + timeout
        last: Optional[dict] = None
        missing: Optional[str] = "no inspection"
        error: Optional[Exception] = None
        while True:
            try:
                last = self.inspect(read_threads=False, check_socket_reachable=False)
                missing = self.protocol.not_ready(last)
                if missing is None:
                    return last
            except _tracecorr.TracecorrError as e:
                error = e
            if not self.alive():
                raise RuntimeError(f"{self.description()} ended ({self.exit_description()}) before it was ready:\n"
                                   f"{self.output()}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{self.description()}: {missing} after {timeout} s "
                                   f"(last inspection: {last and last.get('findings')}, error: {error})")
            time.sleep(poll)

    def __getattr__(self, name: str):
        # Only names a Target lacks get here: its protocol's target helpers, bound to it.
        if name.startswith("_") or name == "protocol":
            raise AttributeError(name)
        return _protocol.target_helper(self.protocol, self, name)

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
