"""tracecorr: script profiler-to-tracer correlation protocols from Python.

The heavy lifting (codecs, inspection, the OTLP receiver, samplers, host
agents, the conformance runner, verdicts and reports) is libtracecorr's,
reached through the thin extension :mod:`tracecorr._tracecorr`. This package
adds conveniences for writing scenarios, for any protocol:

* :class:`Target` launches a process under test with the standard environment
  (OTLP export, and what its protocol needs to be on) or attaches to one, and
  inspects it;
* :class:`OtlpReceiver` receives the process's spans;
* :func:`make_sampler` makes the engine's BPF or ptrace sampler;
* :func:`run_conformance` runs the same suite as ``tracecorr conform``;
* :func:`protocols`, :func:`registry`, :func:`requirements` and :func:`find_requirement`
  read the compiled-in protocol registries.

Each protocol brings its own subpackage, named like its package folder
(``tracecorr.<package>``: its codecs, messages, its profiler's side), which
registers with :mod:`tracecorr.protocol`. Names a protocol's subpackage took
over from this module still resolve here (module ``__getattr__``).
"""
from __future__ import annotations

import json as _json
from typing import List as _List, Optional as _Optional

from . import _tracecorr
from ._tracecorr import (  # noqa: F401  (re-exported)
    HAVE_BPF,
    Evidence,
    Level,
    ProtocolRun,
    ProtocolSpec,
    RECORD_MAX_BYTES,
    RecordLayout,
    Requirement,
    RequirementResult,
    Role,
    RunResult,
    SendOutcome,
    TlsVariable,
    TracecorrError,
    Verdict,
    base64url_decode,
    base64url_nopad,
    exit_code,
    find_requirement,
    from_hex,
    inspect_process,
    render_console,
    render_html,
    render_json,
    render_junit,
    requirements,
    resolve_tls_variable,
    summary_line,
    to_hex,
    unjudged,
    validate_ids,
)
from . import protocol as _protocol
from .conformance import run_conformance  # noqa: F401
from .otlp import OtlpReceiver  # noqa: F401
from .sampling import make_sampler  # noqa: F401
from .target import Target  # noqa: F401


def protocols() -> _List[ProtocolSpec]:
    """The protocols compiled into the extension (id, title, requirements, registry_json)."""
    return _tracecorr.protocols()


def registry(protocol: _Optional[str] = None) -> dict:
    """spec/<protocol>.json as compiled into the library, parsed (a fresh dict each call).
    ``protocol``: its id; None: the first compiled in."""
    return _json.loads(_protocol.spec(protocol).registry_json)


_protocol.load_packages()
__getattr__ = _protocol.forwarder(__name__)

__all__ = [
    "HAVE_BPF", "RECORD_MAX_BYTES", "Evidence", "Level", "OtlpReceiver", "ProtocolRun", "ProtocolSpec", "RecordLayout",
    "Requirement",
    "RequirementResult", "Role", "RunResult", "SendOutcome", "Target", "TlsVariable", "TracecorrError", "Verdict",
    "base64url_decode", "base64url_nopad", "exit_code", "find_requirement", "from_hex", "inspect_process",
    "make_sampler", "protocols", "registry", "render_console", "render_html", "render_json", "render_junit",
    "requirements", "resolve_tls_variable", "run_conformance", "summary_line", "to_hex", "unjudged", "validate_ids",
] + _protocol.exported_names(__name__)
