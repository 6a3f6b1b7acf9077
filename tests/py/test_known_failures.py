"""The known-failure list (known_failures.txt) names real tests, each with an
issue: a line naming a test that no longer exists would silently stop
tracking anything."""
import re
from pathlib import Path

from known_failures import known_failures

ROOT = Path(__file__).resolve().parents[2]


def test_every_known_failure_names_an_existing_test_and_an_issue():
    known = known_failures()
    for node, why in known.items():
        module, _, test = node.partition("::")
        source = ROOT / module
        assert source.is_file(), f"{node}: no module {module}"
        function = test.split("[")[0]
        assert re.search(rf"^def {re.escape(function)}\(", source.read_text(), re.M), f"{node}: no test {function}"
        assert re.match(r"(flaky )?\d+:", why), f"{node}: names no issue ({why!r})"
