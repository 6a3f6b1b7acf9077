"""tests/py/known_failures.txt: tests known to fail on main, each with its
issue (read by tests/py/conftest.py, which runs them as strict xfails)."""
from pathlib import Path

LIST = Path(__file__).resolve().parents[1] / "py" / "known_failures.txt"


def known_failures() -> dict[str, str]:
    """node id -> why it is known to fail."""
    known = {}
    for line in LIST.read_text().splitlines() if LIST.exists() else []:
        node, _, why = line.partition("#")
        if node.strip():
            known[node.strip()] = why.strip() or "listed in known_failures.txt"
    return known
