#!/usr/bin/python3
"""Writes tests/py/shard_weights.json, the seconds each test module took, from
the files TRACECORR_TEST_CPU_REPORT=FILE made (tests/py/conftest.py): the
weights by which `pytest --shard K/N` deals modules out to scripts/test.sh's
processes. Measure on an idle machine with the test command itself:

  rm -f /tmp/cpu.tsv && TRACECORR_TEST_CPU_REPORT=/tmp/cpu.tsv bash scripts/test.sh
  scripts/shard-weights.py /tmp/cpu.tsv

Given several reports, a module weighs its mean. Stale weights cost balance, never a test: a module the file lacks weighs the
conftest's default."""
import json
import sys
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "tests/py/shard_weights.json"


def main(reports: list[str]) -> None:
    if not reports:
        sys.exit(__doc__)
    seconds: dict[str, float] = defaultdict(float)
    for report in reports:
        for line in Path(report).read_text().splitlines():
            _cpu, wall, nodeid = line.split("\t")
            seconds[nodeid.split("::")[0]] += float(wall)
    mean = {m: s / len(reports) for m, s in seconds.items()}
    OUT.write_text(json.dumps({"comment": "wall seconds per test module (the mean of the runs measured), from "
                                          "scripts/shard-weights.py", "seconds": {m: round(s, 1) for m, s in sorted(mean.items())}},
                              indent=1) + "\n")
    print(f"{OUT}: {len(mean)} modules, {sum(mean.values()):.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
