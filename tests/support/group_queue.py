"""A queue of test groups shared by pytest processes (`pytest --claim DIR`,
tests/py/conftest.py): each process takes the next group no process has taken,
until none is left, so that processes started side by side end together
whatever the groups weigh on this machine, which a dealing fixed in advance
(--shard) cannot know. A claim is a file made with O_CREAT | O_EXCL in DIR:
the one process that makes it runs the group.

Groups marked alone (the arm64 guest: SHARD_ALONE) are taken first, and any
time. The others wait until DIR/open exists: scripts/test.sh starts the first
process beside ctest and the host-wide tests, which must meet no other test's
targets, and opens the queue when they have ended."""
from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

OPEN_FILE = "open"
OPEN_POLL_S = 1.0


def claim_name(group: str) -> str:
    """A file name for `group` (a module path or a SHARD_GROUP): readable, and unique by its hash."""
    readable = "".join(c if c.isalnum() or c in "-_." else "_" for c in group)[-80:]
    return f"{readable}-{hashlib.sha256(group.encode()).hexdigest()[:12]}.claim"


class GroupQueue:
    def __init__(self, directory: Path, order: list[str], alone: frozenset[str]):
        """`order`: every group, the order they are offered in (heaviest first)."""
        self.directory = directory
        self.order = [g for g in order if g in alone] + [g for g in order if g not in alone]
        self.alone = alone
        self.taken: list[str] = []

    def claim(self, group: str) -> bool:
        try:
            fd = os.open(self.directory / claim_name(group), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as out:
            out.write(f"{os.getpid()} {group}\n")
        self.taken.append(group)
        return True

    def wait_open(self) -> None:
        while not (self.directory / OPEN_FILE).exists():
            time.sleep(OPEN_POLL_S)

    def groups(self):
        """Yields each group this process claims, in order, until none is left."""
        for group in self.order:
            if group not in self.alone:
                self.wait_open()
            if self.claim(group):
                yield group
