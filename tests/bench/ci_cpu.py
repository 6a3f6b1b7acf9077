#!/usr/bin/python3
"""Where a test run's CPU went, by test module: the sums of the report that
TRACECORR_TEST_CPU_REPORT=FILE makes (tests/py/conftest.py: each test's CPU
seconds, its children's included, its wall seconds, its node id), largest
first. The CI's figures in BENCHMARKS.md:

  CI=true TRACECORR_TEST_CPU_REPORT=/tmp/cpu.tsv bash .ci/run
  tests/bench/ci_cpu.py /tmp/cpu.tsv
"""
import sys
from collections import Counter
from pathlib import Path


def main(report: str, top: int = 40) -> None:
    cpu, wall, tests = Counter(), Counter(), Counter()
    for line in Path(report).read_text().splitlines():
        seconds, wall_seconds, nodeid = line.split("\t")
        module = nodeid.split("::")[0]
        cpu[module] += float(seconds)
        wall[module] += float(wall_seconds)
        tests[module] += 1
    print(f"{sum(cpu.values()):.0f} CPU-s in {sum(tests.values())} tests")
    for module, seconds in cpu.most_common(top):
        print(f"{seconds:8.1f} CPU-s {wall[module]:8.1f} s wall {tests[module]:5d} tests  {module}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
