"""The HTML report of a real conform run, rendered in a real browser.

One `tracecorr conform --html` run against the reference fixture; headless
Chromium (Debian's `chromium`) loads the page from disk, and the DOM it built
must name every judged requirement and hold the pictures, each non-empty. The
screenshot is kept under <build>/test-artifacts/ for people to look at.
"""
from __future__ import annotations

import html.parser
import os
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
    # The deferral picture: a point per exported transaction and per child span (the baseline).
    spans = run.report["figures"]["deferral"]
    assert sum(1 for s in spans if s["transaction"]) >= 5 and sum(1 for s in spans if not s["transaction"]) >= 5
    assert dom.count("svg", **{"data-figure": "deferral"}) == 1
    assert dom.inside("deferral", "circle") >= sum(1 for s in spans if s["transaction"])
    # The flame graphs: real samples of the reference, correlated with its transactions.
    flames = run.report["figures"]["flames"]
    assert "ptrace sampler" in flames["source"]
    assert flames["transactions"], f"no sample fell inside a transaction: {flames}"
    assert dom.count("svg", **{"data-figure": "flame"}) == len(flames["transactions"])
    assert dom.inside("flame", "rect") >= len(flames["transactions"])
    frames = {f for t in flames["transactions"] for s in t["stacks"] for f in s["frames"]}
    assert any("(tracecorr-fixture)" in f and not f.startswith("[") for f in frames), \
        f"no frame was named from the fixture's ELF symbols: {sorted(frames)[:20]}"
    # TLS-04: the watched stores, in order.
    assert run.report["figures"]["record_stores"], "no record store was watched"
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
