"""Helpers for the launch tests: processes counted by a tag in their command
line (what a run leaves running), and containers made with `unshare` and
`chroot` (no container runtime), whose root shows the host's /usr and the
build directory at their own paths and nothing of the host's /tmp."""
from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import conform_support as cs


def tagged(tag: str) -> set[int]:
    """Live processes whose command line holds `tag`."""
    out = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
            continue
        if tag.encode() in cmdline and state not in ("Z", "X"):
            out.add(int(entry.name))
    return out


def left_running(tag: str, patience_s: float = 5.0) -> set[int]:
    """The tagged processes still running after `patience_s` (init reaps
    orphans asynchronously): empty when nothing outlived the run."""
    deadline = time.monotonic() + patience_s
    while True:
        found = tagged(tag)
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.05)


def unique_tag(what: str) -> str:
    return f"tc-{what}-{os.getpid()}-{time.monotonic_ns()}"


def make_root(root: Path) -> Path:
    """A container root: /usr (with the merged /bin, /lib, /lib64 links), /dev,
    /proc and the build directory are mounted into it by container_command()
    inside the container's own mount namespace; its /tmp is its own."""
    root.mkdir(parents=True, exist_ok=True)
    for d in ("usr", "dev", "proc", "tmp", "etc"):
        (root / d).mkdir(exist_ok=True)
    (root / "tmp").chmod(0o1777)
    for link in ("bin", "sbin", "lib", "lib64"):
        if Path("/" + link).is_symlink() and not (root / link).exists():
            (root / link).symlink_to(os.readlink("/" + link))
    (root / str(cs.BUILD).lstrip("/")).mkdir(parents=True, exist_ok=True)
    return root


def container_command(root: Path, argv: list[str]) -> list[str]:
    """`argv` run in a container as a wrapper script starts one: new mount and
    pid namespaces (`unshare --mount --pid --fork`), the mounts it needs (each
    `mount` a child the wrapper waits for), then `exec chroot ROOT argv`."""
    mounts = [
        f"mount --bind /usr {shlex.quote(str(root / 'usr'))}",
        f"mount --rbind /dev {shlex.quote(str(root / 'dev'))}",
        f"mount -t proc proc {shlex.quote(str(root / 'proc'))}",
        f"mount --bind {shlex.quote(str(cs.BUILD))} {shlex.quote(str(root / str(cs.BUILD).lstrip('/')))}",
    ]
    script = " && ".join(mounts) + f" && exec chroot {shlex.quote(str(root))} " + shlex.join(argv)
    return ["unshare", "--mount", "--pid", "--fork", "/bin/bash", "-c", script]
