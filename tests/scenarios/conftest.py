"""Scenario defaults: the reference fixture as the agent under test, and shared helpers.

Run against any agent with ``--tracecorr-cmd "CMD ARGS"`` (or ``--tracecorr-pid PID``);
without either, the reference fixture from $TRACECORR_BUILD (default: build/ in this repository)
is launched with two workload threads. The agent must keep running transactions
(local root spans) on its threads: the scenarios read the ids from the threads' records.
"""
import pytest

from scenario_support import FIXTURE


def pytest_addoption(parser, pluginmanager):
    # The installed package registers the plugin through its pytest11 entry point;
    # in-tree it is registered here (pytest replays pytest_addoption for it).
    if not pluginmanager.has_plugin("tracecorr"):
        from tracecorr import pytest_plugin
        pluginmanager.register(pytest_plugin, "tracecorr")


@pytest.fixture(scope="session")
def tracecorr_default_cmd():
    if not FIXTURE.exists():
        raise pytest.UsageError(f"{FIXTURE} is not built: build the fixtures, set TRACECORR_BUILD, "
                                f"or give --tracecorr-cmd")
    return f"{FIXTURE} --threads 2"
