"""The HTML report of a real conform run, rendered in a real browser.

One `tracecorr conform --html` run against the reference fixture; headless
Chromium (Debian's `chromium`) loads the page from disk, and the DOM it built
must name every judged requirement and hold the pictures, each non-empty. The
screenshot is kept under <build>/test-artifacts/ for people to look at.
"""
from __future__ import annotations

import html.parser
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conform_support import BUILD, TRACECORR, fixture_program, run_conform

CHROMIUM = shutil.which("chromium")
ARTIFACTS = BUILD / "test-artifacts"


def chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    # Not a skip: the page must be proven in a browser, and scripts/setup.sh --tests installs one.
    assert CHROMIUM, "Debian's chromium is not installed: run scripts/setup.sh --tests"
    # --no-sandbox: tests run as root; a throwaway profile so runs never share state.
    profile = Path(os.environ.get("TMPDIR", "/tmp")) / f"tracecorr-chromium-{os.getpid()}"
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            f"--user-data-dir={profile}", *args]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=True)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


class Dom(html.parser.HTMLParser):
    """The elements of the DOM Chromium dumped, with their attributes and the
    stack of enclosing elements' data-figure values."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict, str | None]] = []
        self._figures: list[str | None] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        figure = a.get("data-figure") or (self._figures[-1] if self._figures else None)
        self.elements.append((tag, a, figure))
        if tag not in ("rect", "circle", "line", "path", "input", "meta", "br"):
            self._figures.append(figure)

    def handle_endtag(self, tag):
        if tag not in ("rect", "circle", "line", "path", "input", "meta", "br") and self._figures:
            self._figures.pop()

    def ids(self) -> set[str]:
        return {a["id"] for _, a, _ in self.elements if "id" in a}

    def inside(self, figure: str, tag: str) -> int:
        return sum(1 for t, _, f in self.elements if t == tag and f == figure)

    def count(self, tag: str, **attrs) -> int:
        return sum(1 for t, a, _ in self.elements if t == tag and all(a.get(k) == v for k, v in attrs.items()))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("html-report")
    html_path = out / "report.html"
    run = run_conform([str(fixture_program("x86_64"))], out_dir=out, extra_args=["--html", str(html_path)])
    assert run.report is not None and html_path.exists(), run.explain()
    return run, html_path


def test_conform_page_renders_in_chromium_with_every_requirement_and_the_pictures(report):
    run, html_path = report
    dumped = chromium("--dump-dom", html_path.as_uri()).stdout
    dom = Dom()
    dom.feed(dumped)
    ids = dom.ids()
    judged = [r["id"] for r in run.report["results"]]
    assert len(judged) > 30
    missing = [i for i in judged if f"req-{i}" not in ids]
    assert not missing, f"requirements missing from the page: {missing}"
    # Every verdict is shown as it is in the JSON report.
    for r in run.report["results"]:
        assert dom.count("tr", id=f"req-{r['id']}", **{"data-verdict": r["verdict"]}) == 1, r["id"]
    # The deferral picture (the package's scatter): a point per exported transaction and per child span (the baseline).
    scatters = {s["caption"]["id"]: s for s in run.report["figures"]["scatters"]}
    assert scatters["deferral"]["caption"]["title"] == "Deferral timing", scatters["deferral"]["caption"]
    points = scatters["deferral"]["points"]
    assert sum(1 for p in points if p["primary"]) >= 5 and sum(1 for p in points if not p["primary"]) >= 5
    assert dom.count("svg", **{"data-figure": "deferral"}) == 1
    assert dom.inside("deferral", "circle") >= sum(1 for p in points if p["primary"])
    # The flame graphs: real samples of the reference, correlated with its transactions.
    flames = run.report["figures"]["stacks"]
    assert flames["caption"]["context"] == "transaction", flames["caption"]
    assert "ptrace sampler" in flames["source"]
    assert flames["contexts"], f"no sample fell inside a transaction: {flames}"
    assert dom.count("svg", **{"data-figure": "flame"}) == len(flames["contexts"])
    assert dom.inside("flame", "rect") >= len(flames["contexts"])
    frames = {f for t in flames["contexts"] for s in t["stacks"] for f in s["frames"]}
    assert any("(tracecorr-fixture)" in f and not f.startswith("[") for f in frames), \
        f"no frame was named from the fixture's ELF symbols: {sorted(frames)[:20]}"
    # TLS-04: the watched stores, in order, captioned by the package.
    watch = run.report["figures"]["record_watch"]
    assert watch["caption"]["requirement"] == "TLS-04" and watch["stores"], "no record store was watched"
    assert dom.count("svg", **{"data-figure": "tls04"}) >= 1 and dom.inside("tls04", "rect") >= 3
    assert dom.count("svg", **{"data-figure": "timeline"}) == len(run.report["figures"]["timelines"]) >= 5


def test_screenshot_is_kept_as_an_artefact(report):
    _, html_path = report
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "html-report.png"
    shot.unlink(missing_ok=True)
    chromium("--window-size=1280,2200", f"--screenshot={shot}", html_path.as_uri())
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000, f"{shot}: {len(data)} bytes"


def test_saved_json_report_renders_the_same_page(report, tmp_path):
    run, html_path = report
    again = tmp_path / "again.html"
    subprocess.run([str(TRACECORR), "report", "--html", str(again), str(run.json_path)], check=True, timeout=60)
    assert again.read_text() == html_path.read_text()


# A report saved by main's build at 2474359 (`tracecorr conform --json` on the reference, its lists cut short), when
# the figures were still in Elastic v1's words ("deferral", "record_stores", "flames" per transaction), and the page
# that build's `tracecorr report --html` rendered of it.
SAVED_BY_MAIN = Path(__file__).resolve().parent / "data" / "report-saved-by-main-2474359.json"


def test_a_report_saved_before_the_figures_were_generic_renders_as_it_did(tmp_path):
    saved = json.loads(SAVED_BY_MAIN.read_text())
    assert {"deferral", "record_stores", "flames"} <= set(saved["figures"]), "not the older shape"
    page = tmp_path / "old.html"
    subprocess.run([str(TRACECORR), "report", "--html", str(page), str(SAVED_BY_MAIN)], check=True, timeout=60)
    rendered = page.read_text()
    assert "<h3>Deferral timing</h3>" in rendered and "<h3>TLS-04: valid-byte update timeline</h3>" in rendered
    # The same page to a reader: the captions are the package's strings now, escaped as every string is (that build
    # wrote the flame graphs' apostrophe raw, this one as &#39;), and nothing else differs.
    before = SAVED_BY_MAIN.with_suffix(".html").read_text()
    assert html.unescape(rendered) == html.unescape(before)


# Script that, if it ran, would mark the page: every payload tries a different way in.
MARK = "document.documentElement.setAttribute('data-pwned','{}')"
PAYLOADS = [
    "<script>" + MARK.format("script") + "</script>",
    "\"><img src=x onerror=\"" + MARK.format("img") + "\">",
    "'><svg onload=\"" + MARK.format("svg") + "\">",
    "</title></style></textarea></script><script>" + MARK.format("closing") + "</script>",
    "<a href=\"javascript:" + MARK.format("href") + "\" id=\"pwned-link\">x</a>",
]
# Enumerations the reader checks (a doctored one is refused, not rendered).
ENUMS = {"schema", "level", "role", "verdict", "status"}


def doctor(value, key=None, counter=[0]):
    """Every string field carries a payload (in turn), and every map (the
    counters) gains keys that are payloads."""
    if isinstance(value, dict):
        out = {k: doctor(v, k) for k, v in value.items()}
        if key == "counters":
            out.update({p: i for i, p in enumerate(PAYLOADS)})
        return out
    if isinstance(value, list):
        return [doctor(v, key) for v in value]
    if isinstance(value, str) and key not in ENUMS:
        counter[0] += 1
        return value + PAYLOADS[counter[0] % len(PAYLOADS)]
    return value


def test_a_doctored_saved_report_runs_no_script_and_the_pages_own_script_still_runs(report, tmp_path):
    run, _ = report
    doctored = tmp_path / "doctored.json"
    saved = json.loads(run.json_path.read_text())
    saved["counters"] = dict(saved.get("counters", {}), **{"spans_received.enabled": 1})
    doctored.write_text(json.dumps(doctor(saved)))
    page = tmp_path / "doctored.html"
    subprocess.run([str(TRACECORR), "report", "--html", str(page), str(doctored)], check=True, timeout=60)
    text = page.read_text()
    csp = re.search(r'Content-Security-Policy" content="([^"]*)"', text).group(1)
    assert "'unsafe-inline'" not in re.search(r"script-src ([^;]*)", csp).group(1), csp
    dumped = chromium("--dump-dom", page.as_uri()).stdout
    dom = Dom()
    dom.feed(dumped)
    # Nothing ran, and nothing injected became an element.
    html_attrs = [a for t, a, _ in dom.elements if t == "html"]
    assert html_attrs and "data-pwned" not in html_attrs[0], html_attrs
    assert dom.count("script") == 1, "an injected <script> element exists"
    assert dom.count("img") == 0 and not dom.ids() & {"pwned-link"}
    handlers = [(t, k) for t, a, _ in dom.elements for k in a if k.startswith("on")]
    assert not handlers, handlers
    # The payloads are on the page as text: rendered, escaped.
    assert "&lt;script&gt;document.documentElement.setAttribute" in dumped
    assert dumped.count("onerror=") >= 1 and "&lt;img src=x onerror=" in dumped
    # The counter names (printed raw before) are there, escaped.
    assert "&lt;svg onload=" in dumped
    # The page's own script ran (CSP allows it by hash): it shows the verdict filter.
    filters = [a for t, a, _ in dom.elements if a.get("id") == "filter"]
    assert filters and "hidden" not in filters[0], filters


def test_agent_page_draws_flame_graphs_of_its_own_samples(tmp_path):
    # The reference holding two transactions open (--hold), sampled by the
    # host agent's ptrace reader (needs no BPF): every flame graph is one of
    # the journaled transactions, with frames named from the fixture's symbols.
    from test_agent_e2e import Fixture  # the fixture launcher of the agent tests

    fx = Fixture(tmp_path, ["--hold", "--threads", "2"])
    page = tmp_path / "agent.html"
    try:
        subprocess.run([str(TRACECORR), "agent", "--pid", str(fx.pid), "--duration", "1.5", "--reader", "ptrace",
                        "--frequency", "50", "--quiet", "--html", str(page)], check=True, timeout=120,
                       capture_output=True)
        held = {ev["transaction_id"] for ev in fx.events("record") if ev.get("valid") and ev.get("trace_present")}
    finally:
        fx.stop()
    dom = Dom()
    dom.feed(chromium("--dump-dom", page.as_uri()).stdout)
    flames = [a for t, a, _ in dom.elements if t == "h3" and a.get("id", "").startswith("flame-")]
    assert flames, "the agent page has no flame graph"
    assert {a["id"][len("flame-"):] for a in flames} <= held, (flames, held)
    assert dom.inside("flame", "rect") >= len(flames)
    assert "(tracecorr-fixture)" in page.read_text()
    assert dom.count("svg", **{"data-figure": "deferral"}) == 0  # an agent run judges no deferral
