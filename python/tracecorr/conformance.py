"""The conformance suite of ``tracecorr conform``, from Python."""
from __future__ import annotations

import shlex
from typing import Dict, Optional, Sequence, Union

from . import _tracecorr
from ._tracecorr import RunResult

__all__ = ["run_conformance", "DEFAULT_MAIN_SESSION_SECONDS"]

# The main session's phases last this long at time_scale 1 (the CLI's --duration scales them).
DEFAULT_MAIN_SESSION_SECONDS = 5.0


def run_conformance(cmd: Union[str, Sequence[str], None] = None, *, pid: Optional[int] = None,
                    only: Sequence[str] = (), strict: bool = False, personality: str = "spec",
                    duration: Optional[float] = None, gdbstub: str = "", otlp_port: int = 0,
                    expectations: Optional[str] = None, quiet: bool = True, protocol: str = "",
                    options: Optional[Dict[str, str]] = None) -> RunResult:
    """Runs the suite against ``cmd`` (launch mode, restarted per session) or ``pid`` (attach mode).

    Returns the C++ :class:`RunResult`; render it with :func:`tracecorr.render_console`,
    :func:`~tracecorr.render_junit` or :func:`~tracecorr.render_json`, and gate with
    :func:`tracecorr.exit_code`. ``duration`` (seconds for the main session, like
    ``--duration``), ``expectations`` (``--expect FILE``), ``protocol`` (``--protocol``,
    default: auto, the one the target publishes) and ``options``, the protocol suite's own settings (``--NAME VALUE``;
    ``personality`` is the option of that name, kept as a keyword). Unknown ids in ``only`` raise
    TracecorrError.
    """
    if (cmd is None) == (pid is None):
        raise ValueError("give either cmd (launch mode) or pid (attach mode)")
    argv = [] if cmd is None else (shlex.split(cmd) if isinstance(cmd, str) else list(cmd))
    time_scale = duration / DEFAULT_MAIN_SESSION_SECONDS if duration else 1.0
    run = _tracecorr.run_conformance(argv, pid, list(only), strict, personality, time_scale, gdbstub, otlp_port,
                                     quiet, protocol, dict(options or {}))
    if expectations:
        _tracecorr.apply_expectations_file(run, expectations)
    return run
