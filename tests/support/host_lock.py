"""One host, two pytest processes: scripts/test.sh runs the conform matrices
(marker `matrix`) in a second pytest process beside the rest. A test that acts
on every process of the host (`tracecorr agent --all` registers with, and
sends to, every agent it finds) must not run while a conform run of the other
process has a target up: it would send to that target and change its verdicts.

So every conform run holds the host lock shared, and such a test holds it
exclusively. Writers go first: an exclusive holder first takes the gate, which
new shared holders pass through, so a stream of overlapping conform runs cannot
starve it. flock(2) locks are per open file, so this works between the threads
of one process as between processes.

The lock lives in the directory TRACECORR_TEST_HOST_LOCK names (test.sh makes
one per run); without it (one pytest process) both are no-ops.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

ENV = "TRACECORR_TEST_HOST_LOCK"


def _directory() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


@contextlib.contextmanager
def _locked(path: Path, operation: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, operation)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def shared() -> Iterator[None]:
    """Held around one conform run (its targets are up only inside it)."""
    directory = _directory()
    if directory is None:
        yield
        return
    fd = os.open(directory / "host", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        with _locked(directory / "gate", fcntl.LOCK_SH):  # an exclusive holder waiting: wait behind it
            fcntl.flock(fd, fcntl.LOCK_SH)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Held by a test that acts on every process of the host."""
    directory = _directory()
    if directory is None:
        yield
        return
    with _locked(directory / "gate", fcntl.LOCK_EX), _locked(directory / "host", fcntl.LOCK_EX):
        yield
