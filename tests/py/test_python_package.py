"""The tracecorr Python package: import, protocol packages, registry, codecs, result
model, receiver, pytest plugin, and installation with pip (Debian's tools only).

In-tree the extension is found in python/tracecorr/ (the CMake build writes it
there); an installed package is used when present.
"""
import importlib
import json
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
try:
    import tracecorr
except ImportError:
    sys.path.insert(0, str(REPO / "python"))
    import tracecorr

from tracecorr import _tracecorr, elastic_v1  # noqa: E402
from tracecorr.elastic_v1 import messages  # noqa: E402

from build_products import REGISTRY  # noqa: E402
REGISTRY_ID = "elastic-v1"
SYSTEM_PYTHON = "/usr/bin/python3"

pytest_plugins = ["pytester"]


# ---- import and registry -----------------------------------------------------------------------
def test_import_exposes_api():
    for name in ("Target", "HostAgent", "OtlpReceiver", "run_conformance", "messages", "registry",
                 "render_json", "render_junit", "render_console", "exit_code", "TracecorrError"):
        assert hasattr(tracecorr, name), name
    assert issubclass(tracecorr.TracecorrError, RuntimeError)
    assert isinstance(_tracecorr.HAVE_BPF, bool)
    stubs = Path(tracecorr.__file__).parent / "_tracecorr"
    assert (stubs / "__init__.pyi").exists() and (stubs / "elastic_v1.pyi").exists()


def test_each_compiled_in_protocol_has_its_package():
    ids = [p.id for p in tracecorr.protocols()]
    assert ids[0] == REGISTRY_ID and "otel-process-context" in ids
    packages = tracecorr.protocol.packages()
    assert sorted(p.id for p in packages) == sorted(ids)
    # Several compiled in: the first (TRACECORR_PROTOCOLS' order) is the default.
    assert tracecorr.protocol.package() is tracecorr.protocol.package(REGISTRY_ID)
    assert tracecorr.protocol.package(REGISTRY_ID).module is elastic_v1
    with pytest.raises(ValueError, match="no protocol package 'nope'"):
        tracecorr.protocol.package("nope")
    # Its environment names the registry's variables; the engine's standard environment adds it to OTel's.
    env = tracecorr.target.standard_env("http://127.0.0.1:1", "/tmp/sockets", "auto")
    assert env[REGISTRY["config"]["enabled"]["env"]] == "auto"
    assert env[REGISTRY["config"]["socket_dir"]["env"]] == "/tmp/sockets"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://127.0.0.1:1"
    assert REGISTRY["config"]["enabled"]["env"] not in tracecorr.target.standard_env(None, None, None)


def test_former_names_resolve_in_the_protocol_package():
    """What tracecorr exported before Elastic v1 had a package is the package's, not a copy."""
    assert tracecorr.TlsRecord is elastic_v1.TlsRecord is _tracecorr.elastic_v1.TlsRecord
    assert tracecorr.HostAgent is elastic_v1.HostAgent
    assert tracecorr.attribute_name is elastic_v1.attribute_name
    assert tracecorr.messages is elastic_v1.messages
    import tracecorr.messages as legacy_messages
    assert legacy_messages is elastic_v1.messages
    assert importlib.import_module("tracecorr.agent") is elastic_v1.agent
    from tracecorr.agent import HostAgent, make_sampler
    assert HostAgent is elastic_v1.HostAgent and make_sampler is tracecorr.make_sampler
    assert tracecorr.otlp.stack_trace_ids is elastic_v1.stack_trace_ids
    assert {"TlsRecord", "messages"} <= set(tracecorr.__all__)
    with pytest.raises(AttributeError):
        tracecorr.no_such_name
    with pytest.raises(AttributeError):
        tracecorr.otlp.TlsRecord  # only the names the package exports from that module


def test_registry_matches_spec_file():
    ids = [r.id for r in tracecorr.requirements()]  # every protocol's, protocol by protocol
    assert ids[:len(REGISTRY["requirements"])] == [r["id"] for r in REGISTRY["requirements"]]
    registries = [json.loads((REPO / "spec" / f"{p.id}.json").read_text()) for p in tracecorr.protocols()]
    assert ids == [r["id"] for registry in registries for r in registry["requirements"]]
    assert tracecorr.registry() == REGISTRY == tracecorr.registry(REGISTRY_ID) == elastic_v1.registry()
    with pytest.raises(ValueError):
        tracecorr.registry("nope")
    msg03 = tracecorr.find_requirement("MSG-03")
    assert msg03.level == tracecorr.Level.MUST and msg03.area == "MSG"
    assert tracecorr.find_requirement("NOPE-01") is None
    assert tracecorr.validate_ids(["MSG-03", "NOPE-01", "ATTR-04"]) == ["NOPE-01"]
    assert elastic_v1.attribute_name() == REGISTRY["attribute"]["name"]


# ---- codecs ------------------------------------------------------------------------------------
def _messages_layout(name):
    return next(m for m in REGISTRY["layouts"]["messages"] if m["name"] == name)


def test_correlation_round_trip_and_layout():
    trace, txn, stack = bytes(range(16)), bytes(range(100, 108)), bytes(range(200, 216))
    datagram = messages.correlation(trace, txn, stack, count=513)
    layout = _messages_layout("correlation")
    assert len(datagram) == layout["fixed_size"]
    assert int.from_bytes(datagram[0:2], sys.byteorder) == layout["message_type"]
    fields = {f["name"]: f for f in layout["fields"]}
    assert datagram[fields["trace_id"]["offset"]:][:16] == trace
    assert datagram[fields["stack_trace_id"]["offset"]:][:16] == stack
    m = messages.decode(datagram)
    assert isinstance(m, elastic_v1.Correlation)
    assert (m.trace_id, m.transaction_id, m.stack_trace_id, m.count) == (trace, txn, stack, 513)
    # hex ids are accepted, and mean the same bytes
    assert messages.correlation(trace.hex(), txn.hex(), stack.hex(), count=513) == datagram
    # mutate = decode, set, encode (C++ both ways)
    zero = messages.decode(messages.mutate(datagram, count=0, trailing=b"\x01\x02"))
    assert zero.count == 0 and zero.trailing == b"\x01\x02" and zero.trace_id == trace
    with pytest.raises(AttributeError):
        messages.mutate(datagram, no_such_field=1)
    with pytest.raises(ValueError):
        messages.correlation(b"short", txn, stack)


def test_truncated_messages_are_rejected_at_every_length():
    datagram = messages.correlation(bytes(16), bytes(8), bytes(16), 1)
    for n in range(len(datagram)):
        with pytest.raises(tracecorr.TracecorrError) as e:
            messages.decode(messages.truncate(datagram, n))
        assert e.value.requirement in ("", "MSG-04")
    assert messages.truncate(datagram, -1) == datagram[:-1]


def test_registration_and_unknown_round_trip():
    reg = messages.registration(1234, "host-a", minor=2, trailing=b"later")
    m = messages.decode(reg)
    assert isinstance(m, elastic_v1.Registration)
    assert (m.samples_delay_ms, m.host_id, m.minor, m.trailing) == (1234, b"host-a", 2, b"later")
    assert messages.minimum_size(reg) == len(reg) - len(b"later")
    m1 = messages.decode(messages.registration(5, b"\xff\xfe", minor=1))  # host-id need not be UTF-8 (MSG-07)
    assert m1.minor == 1 and m1.host_id == b"\xff\xfe"
    u = messages.decode(messages.unknown(77, 3, b"xyz"))
    assert isinstance(u, elastic_v1.UnknownMessage) and (u.type, u.minor, u.payload) == (77, 3, b"xyz")
    # a known type at minor 0 is unknown (MSG-05)
    assert isinstance(messages.decode(messages.mutate(messages.correlation(bytes(16), bytes(8), bytes(16)), minor=0)),
                      elastic_v1.UnknownMessage)


def test_tls_record_and_process_storage_round_trip():
    r = elastic_v1.TlsRecord()
    r.valid, r.trace_present, r.trace_flags = 1, 1, 1
    r.trace_id, r.span_id, r.transaction_id = b"\xab" * 16, b"\xef" * 8, b"\xcd" * 8
    raw = elastic_v1.encode_tls_record(r)
    assert len(raw) == REGISTRY["layouts"]["tls_record"]["size"]
    assert elastic_v1.decode_tls_record(raw) == r
    s = elastic_v1.ProcessStorage()
    s.service_name, s.service_environment, s.socket_file_path = "svc", "prod", "/tmp/x.sock"
    raw = elastic_v1.encode_process_storage(s)
    back = elastic_v1.decode_process_storage(raw)
    assert (back.service_name, back.service_environment, back.socket_file_path) == ("svc", "prod", "/tmp/x.sock")
    assert back.encoded_size == len(raw)
    bad = bytearray(raw)
    bad[2 + 4] = 0xff  # first byte of service_name: invalid UTF-8
    with pytest.raises(tracecorr.TracecorrError) as e:
        elastic_v1.decode_process_storage(bytes(bad))
    assert e.value.requirement == "PROC-03"


def test_ids():
    assert tracecorr.to_hex(b"\x01\xab") == "01ab"
    assert tracecorr.from_hex("01AB", 2) == b"\x01\xab"
    with pytest.raises(ValueError):
        tracecorr.from_hex("01", 2)
    enc = tracecorr.base64url_nopad(bytes(range(250, 256)) + bytes(10))
    assert len(enc) == 22 and "=" not in enc and "+" not in enc and "/" not in enc
    assert tracecorr.base64url_decode(enc) == bytes(range(250, 256)) + bytes(10)
    assert tracecorr.base64url_decode(enc + "==") is None
    assert _tracecorr.base64url_problem("a+b") != ""


# ---- result model and reports --------------------------------------------------------------------
def test_result_model_renders_through_cpp():
    jsonschema = pytest.importorskip("jsonschema")
    run = tracecorr.RunResult()
    run.tool_version = "test"
    ok = _tracecorr.make_result("MSG-03")
    ok.verdict = _tracecorr.judge(ok.level, True)
    ok.reason = "re-registration applied"
    run.add_result(ok)
    bad = _tracecorr.make_result("SOCK-03")  # a SHOULD: a miss is a warning unless strict
    bad.verdict = _tracecorr.judge(bad.level, False)
    assert bad.verdict == tracecorr.Verdict.WARN
    assert _tracecorr.judge(bad.level, False, True) == tracecorr.Verdict.FAIL
    run.add_result(bad)
    assert tracecorr.exit_code(run) == 0 and tracecorr.exit_code(run, True) == 1
    report = json.loads(tracecorr.render_json(run))
    jsonschema.validate(report, json.loads((REPO / "spec" / "report-schema-v2.json").read_text()))
    assert {r["id"]: r["verdict"] for r in report["results"]} == {"MSG-03": "pass", "SOCK-03": "warn"}
    assert "<testsuite" in tracecorr.render_junit(run)
    assert {r["protocol"] for r in report["results"]} == {"elastic-v1"}
    page = tracecorr.render_html(run)
    assert 'id="req-MSG-03"' in page and 'id="req-SOCK-03"' in page and 'data-verdict="warn"' in page
    assert "1 passed" in tracecorr.summary_line(run)
    with pytest.raises(tracecorr.TracecorrError):
        _tracecorr.make_result("NOPE-01")


def test_result_model_gives_no_pass_on_nothing_and_a_section_per_protocol():
    """Issue 25: a run whose verdicts are all skips is the gate's error, with the
    reason; each result names its protocol; sections round-trip."""
    run = tracecorr.RunResult()
    skipped = _tracecorr.make_result("TLS-06")
    skipped.verdict = tracecorr.Verdict.SKIP
    skipped.reason = "the agent publishes records at once"
    run.add_result(skipped)
    assert skipped.protocol == "elastic-v1"
    assert tracecorr.exit_code(run) == 3
    (why,) = tracecorr.unjudged(run)
    assert why.startswith("nothing was judged: 1 skipped of 1 requirement (TLS-06 skip: the agent publishes"), why
    ok = _tracecorr.make_result("PCTX-02")
    ok.verdict = tracecorr.Verdict.PASS
    run.add_result(ok)
    sections = []
    for pid, named, seen in (("elastic-v1", True, ""), ("otel-process-context", False, ""),
                             ("otel-thread-context", False, "schema nodejs_v1_dev")):
        section = tracecorr.ProtocolRun()
        section.id, section.named, section.chosen_by, section.not_applicable = pid, named, "test", seen
        sections.append(section)
    run.protocols = sections
    # elastic-v1 was named and judged nothing; the thread context under another schema is only listed.
    assert tracecorr.unjudged(run) == [
        "elastic-v1 (test) judged nothing: 1 skipped of 1 requirement (TLS-06 skip: the agent publishes records at once)"]
    assert [_tracecorr.protocol_status(run, p) for p in run.protocols] == ["nothing-judged", "judged", "not-applicable"]
    assert [r.id for r in _tracecorr.results_of(run, "otel-process-context")] == ["PCTX-02"]
    report = json.loads(tracecorr.render_json(run))
    assert [p["status"] for p in report["protocols"]] == ["nothing-judged", "judged", "not-applicable"]
    assert report["gate"]["exit_code"] == 3
    assert "not judged" in tracecorr.render_html(run)


# ---- OTLP receiver -----------------------------------------------------------------------------------
def _post_json(url, trace_id, span_id, ids):
    body = {"resourceSpans": [{"resource": {"attributes": [{"key": "host.id", "value": {"stringValue": "h"}}]},
                               "scopeSpans": [{"spans": [{
                                   "traceId": trace_id, "spanId": span_id, "name": "txn",
                                   "startTimeUnixNano": "1", "endTimeUnixNano": "2",
                                   "attributes": [
                                       {"key": elastic_v1.attribute_name(),
                                        "value": {"arrayValue": {"values": [{"stringValue": i} for i in ids]}}},
                                       {"key": "n", "value": {"intValue": "7"}}]}]}]}]}
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def test_receiver_spans_and_wait_releases_gil():
    trace, span = "ab" * 16, "cd" * 8
    with tracecorr.OtlpReceiver() as rx:
        assert rx.endpoint.startswith("http://127.0.0.1:")
        # The export is posted from another Python thread while wait_for blocks: it only
        # arrives if the wait released the GIL.
        poster = threading.Thread(target=_post_json, args=(rx.endpoint + "/v1/traces", trace, span, ["AAA", "BBB"]))
        poster.start()
        got = rx.wait_for_transaction(trace, span, timeout=20)
        poster.join()
        assert got is not None
        assert got.attribute(elastic_v1.attribute_name()) == ["AAA", "BBB"]
        assert got.attribute_type(elastic_v1.attribute_name()) == "string-array"
        assert got.attribute("n") == 7 and got.attribute_type("n") == "int"
        assert got.resource_attribute("host.id") == "h"
        assert got.parent_span_id is None and got.trace_id == bytes.fromhex(trace)
        assert rx.counters()["spans"] == 1
        assert rx.wait_for(lambda spans: len(spans) == 2, 0.05) is False


# ---- pytest plugin ----------------------------------------------------------------------------------------
_PLUGIN_CONFTEST = f"""
import sys
sys.path.insert(0, {str(REPO / 'python')!r})
def pytest_addoption(parser, pluginmanager):
    if not pluginmanager.has_plugin("tracecorr"):
        from tracecorr import pytest_plugin
        pluginmanager.register(pytest_plugin, "tracecorr")
"""


def test_plugin_records_requirement_verdicts(pytester):
    pytester.makeconftest(_PLUGIN_CONFTEST)
    pytester.makepyfile(test_marked="""
        import pytest

        @pytest.mark.requirement("MSG-03")
        def test_must_passes():
            pass

        @pytest.mark.requirement("SOCK-03")
        def test_should_fails():
            assert 1 == 2, "socket blocks"

        @pytest.mark.requirement("ATTR-04", "MSG-04")
        def test_two_ids_skip():
            pytest.skip("not here")

        @pytest.fixture
        def broken():
            raise RuntimeError("setup broke")

        @pytest.mark.requirement("DEFER-01")
        def test_setup_error(broken):
            pass

        def test_unmarked():
            pass
    """)
    out_json, out_junit = pytester.path / "r.json", pytester.path / "r.xml"
    out_html = pytester.path / "r.html"
    result = pytester.runpytest_inprocess(f"--tracecorr-report-json={out_json}",
                                          f"--tracecorr-report-junit={out_junit}",
                                          f"--tracecorr-report-html={out_html}")
    result.assert_outcomes(passed=2, failed=1, skipped=1, errors=1)
    report = json.loads(out_json.read_text())
    verdicts = {r["id"]: r["verdict"] for r in report["results"]}
    assert verdicts == {"MSG-03": "pass", "SOCK-03": "warn", "ATTR-04": "skip", "MSG-04": "skip",
                        "DEFER-01": "error"}
    should = next(r for r in report["results"] if r["id"] == "SOCK-03")
    assert "socket blocks" in should["reason"] and should["probe"].endswith("test_should_fails")
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(report, json.loads((REPO / "spec" / "report-schema-v2.json").read_text()))
    assert out_junit.read_text().count("<testcase") == 5
    assert all(f'id="req-{i}"' in out_html.read_text() for i in verdicts)

    strict = pytester.runpytest_inprocess(f"--tracecorr-report-json={out_json}", "--tracecorr-strict")
    strict.assert_outcomes(passed=2, failed=1, skipped=1, errors=1)
    assert {r["id"]: r["verdict"] for r in json.loads(out_json.read_text())["results"]}["SOCK-03"] == "fail"


def test_plugin_rejects_unknown_requirement(pytester):
    pytester.makeconftest(_PLUGIN_CONFTEST)
    pytester.makepyfile(test_bad="""
        import pytest

        @pytest.mark.requirement("MSG-99")
        def test_x():
            pass
    """)
    result = pytester.runpytest_inprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown requirement id(s) MSG-99*"])


# ---- installation --------------------------------------------------------------------------------------------
def _cmake_build_dir():
    """A configured CMake build directory with the extension target: $TRACECORR_PY_CMAKE_BUILD, else
    $TRACECORR_BUILD, else build-py/ in this repository."""
    for candidate in (os.environ.get("TRACECORR_PY_CMAKE_BUILD"), os.environ.get("TRACECORR_BUILD"),
                      str(REPO / "build-py")):
        if candidate and "TRACECORR_PYTHON_OUTPUT_DIR" in _read(Path(candidate) / "CMakeCache.txt"):
            return candidate
    return None


def _read(path):
    try:
        return path.read_text()
    except OSError:
        return ""


def _run_in_tmp(code, site):
    """Runs code with /usr/bin/python3 from /tmp, seeing only `site` (and the system) on its path."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site)
    return subprocess.run([SYSTEM_PYTHON, "-c", code], cwd="/tmp", capture_output=True, text=True, timeout=60,
                          env=env)


def test_pip_install_into_prefix(tmp_path):
    """pip (no build isolation, Debian's setuptools) installs package, stubs, extension and entry point.

    The extension is the one these tests imported (TRACECORR_PREBUILT_EXTENSION), so no compiler runs
    here; test_setup_build_ext_with_cmake covers the CMake path."""
    prefix = tmp_path / "prefix"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(TRACECORR_PREBUILT_EXTENSION=_tracecorr.__file__, PIP_BREAK_SYSTEM_PACKAGES="1", PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([SYSTEM_PYTHON, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                        "--prefix", str(prefix), str(REPO)], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    installed = list(prefix.rglob("tracecorr/__init__.py"))  # Debian's scheme: local/lib/python3.X/dist-packages
    assert len(installed) == 1, installed
    package = installed[0].parent
    r = _run_in_tmp("import tracecorr, importlib.metadata as md; "
                    "eps = [e.value for e in md.entry_points(group='pytest11') if e.name == 'tracecorr']; "
                    "print(tracecorr.__file__); print(eps); "
                    "print(tracecorr.messages.decode(tracecorr.messages.registration(7, 'h')).samples_delay_ms)",
                    package.parent)
    assert r.returncode == 0, r.stderr
    file_line, eps, delay = r.stdout.splitlines()
    assert file_line == str(package / "__init__.py")
    assert eps == "['tracecorr.pytest_plugin']"
    assert delay == "7"
    assert list(package.glob("_tracecorr*.so")), "extension not installed"
    assert (package / "_tracecorr" / "__init__.pyi").exists() and (package / "py.typed").exists()
    assert (package / "elastic_v1" / "__init__.py").exists() and (package / "_tracecorr" / "elastic_v1.pyi").exists()


def test_setup_build_ext_with_cmake(tmp_path):
    """setup.py build_ext runs CMake (reusing a configured build directory) and copies the module."""
    build_dir = _cmake_build_dir()
    if build_dir is None:
        pytest.skip("no CMake build directory with the Python extension configured (set TRACECORR_BUILD)")
    dry = subprocess.run(["ninja", "-C", build_dir, "-n", "tracecorr_python"], capture_output=True, text=True,
                         timeout=120)
    # (the CONFIGURE_DEPENDS glob check always shows up in a dry run; compiling or linking is what costs)
    if any(word in dry.stdout for word in ("Building", "Linking")):
        pytest.skip(f"{build_dir} is not up to date: building the extension here would recompile "
                    f"(run ninja -C {build_dir} first)")
    out = tmp_path / "lib"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRACECORR_PREBUILT_EXTENSION")}
    env["TRACECORR_CMAKE_BUILD_DIR"] = build_dir
    r = subprocess.run([SYSTEM_PYTHON, "setup.py", "-q", "build_ext", "--build-lib", str(out),
                        "--build-temp", str(tmp_path / "temp")], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    built = list((out / "tracecorr").glob("_tracecorr*.so"))
    assert len(built) == 1, list(out.rglob("*"))
    # The copied module imports on its own (next to the package's Python files).
    (out / "tracecorr").joinpath("__init__.py").write_text("")
    r = _run_in_tmp("import tracecorr._tracecorr as t; print(len(t.requirements()))", out)
    assert r.returncode == 0, r.stderr
    every_registry = [json.loads((REPO / "spec" / f"{p.id}.json").read_text()) for p in tracecorr.protocols()]
    assert int(r.stdout) == sum(len(reg["requirements"]) for reg in every_registry)
