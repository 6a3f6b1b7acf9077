"""A short libFuzzer run of every decoder harness (tests/fuzz/), seeded from
the corpus kept in the repo: a crash, a sanitizer report, a leak or a harness
assertion fails the test. The long run is tests/bench/fuzz_run.sh.

The harnesses are built by the main build (option TRACECORR_FUZZ, on whenever
clang is installed, as scripts/setup.sh --tests does) into <build>/fuzz/bin/.
"""
from __future__ import annotations

import re
import subprocess

import pytest

from build_products import BUILD, REPO
CORPUS = REPO / "tests" / "fuzz" / "corpus"
FUZZERS = ["message", "storage_record", "maps", "elf", "otlp_protobuf", "otlp_json", "gzip", "process_context",
           "otlp_profiles", "json_lines"]
# Each run stops at whichever comes first; together they keep the suite's
# added time to about 15 s on a loaded 2-core machine (libFuzzer adds ~1 s per run).
SECONDS_PER_FUZZER = 1
MAX_RUNS = 100_000


@pytest.mark.parametrize("name", FUZZERS)
def test_fuzzer_short_run_finds_nothing(name, tmp_path):
    binary = BUILD / "fuzz" / "bin" / f"fuzz_{name}"
    assert binary.exists(), f"{binary} missing: configure the build with clang installed (TRACECORR_FUZZ=ON)"
    seeds = CORPUS / name
    assert any(seeds.iterdir()), f"no seed corpus in {seeds}"
    # New inputs go to a scratch directory; the repo's corpus is read only.
    proc = subprocess.run(
        [str(binary), f"-max_total_time={SECONDS_PER_FUZZER}", f"-runs={MAX_RUNS}", "-rss_limit_mb=2048",
         "-max_len=65536", "-timeout=10", f"-artifact_prefix={tmp_path}/", str(tmp_path), str(seeds)],
        capture_output=True, text=True, timeout=120)
    log = proc.stderr
    done = re.search(r"Done (\d+) runs", log)
    assert proc.returncode == 0 and done, f"fuzz_{name} failed (exit {proc.returncode}):\n{log[-4000:]}"
    assert int(done.group(1)) > 0
    crashes = [p.name for p in tmp_path.iterdir() if p.name.startswith(("crash-", "leak-", "timeout-", "oom-"))]
    assert not crashes, f"fuzz_{name} wrote {crashes}"
