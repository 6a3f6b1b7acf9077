"""tracecorr: script the Elastic profiler-to-tracer correlation protocol from Python.

The heavy lifting (codecs, inspection, the OTLP receiver, samplers, the host
agent, the conformance runner, verdicts and reports) is libtracecorr's, reached
through the thin extension :mod:`tracecorr._tracecorr`. This package adds
conveniences for writing scenarios:

* :class:`Target` launches an agent process with the standard environment (or
  attaches to one) and inspects it;
* :class:`HostAgent` talks to the agent's socket like a profiler would, and can
  run the reference host agent (BPF or ptrace sampler) for a while;
* :mod:`tracecorr.messages` builds, truncates and mutates datagrams;
* :class:`OtlpReceiver` receives the agent's spans;
* :func:`run_conformance` runs the same suite as ``tracecorr conform``.
"""
from __future__ import annotations

import json as _json
from functools import lru_cache as _lru_cache

from . import _tracecorr
from ._tracecorr import (  # noqa: F401  (re-exported)
    HAVE_BPF,
    Correlation,
    Evidence,
    Level,
    RECORD_MAX_BYTES,
    ProcessStorage,
    RecordLayout,
    Registration,
    RequirementResult,
    Role,
    RunResult,
    SendOutcome,
    TlsRecord,
    TracecorrError,
    UnknownMessage,
    Verdict,
    base64url_decode,
    base64url_nopad,
    decode_message,
    exit_code,
    find_requirement,
    from_hex,
    inspect_process,
    render_console,
    render_html,
    render_json,
    render_junit,
    requirements,
    summary_line,
    tls_record_layout,
    to_hex,
    validate_ids,
)
from . import messages  # noqa: F401
from .agent import HostAgent, make_sampler  # noqa: F401
from .conformance import run_conformance  # noqa: F401
from .otlp import OtlpReceiver  # noqa: F401
from .target import Target  # noqa: F401

__all__ = [
    "HAVE_BPF", "RECORD_MAX_BYTES", "Correlation", "Evidence", "HostAgent", "Level", "OtlpReceiver", "ProcessStorage",
    "RecordLayout", "Registration",
    "RequirementResult", "Role", "RunResult", "SendOutcome", "Target", "TlsRecord", "TracecorrError",
    "UnknownMessage", "Verdict", "attribute_name", "base64url_decode", "base64url_nopad", "decode_message",
    "exit_code", "find_requirement", "from_hex", "inspect_process", "messages", "registry", "render_console",
    "make_sampler", "render_html", "render_json", "render_junit", "requirements", "run_conformance", "summary_line",
    "tls_record_layout", "to_hex", "validate_ids",
]


@_lru_cache(maxsize=1)
def _registry_text() -> str:
    return _tracecorr.registry_json()


def registry() -> dict:
    """spec/elastic-v1.json as compiled into the library, parsed (a fresh dict each call)."""
    return _json.loads(_registry_text())


def attribute_name() -> str:
    """The span attribute carrying stack trace ids (``elastic.profiler_stack_trace_ids``)."""
    return _tracecorr.spec.kAttributeName
