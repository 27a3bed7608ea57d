"""Repository-level pytest configuration: Hypothesis profiles (the suites themselves ship with the package),
single-threaded torch, compiled bytecode for the Python processes the test command starts, a frozen heap at their
exit, and xdist's work-stealing schedule."""

import os

import pytest
from hypothesis import HealthCheck, settings

from harness.bytecode import share_bytecode
from tests.gate import ALL, GATE, GateTable, cap_searches, selection_for
from tests.interpreter_exit import freeze_heap_at_exit

#: The selection of kvconform's own tests this run makes (tests.gate): the controller's, handed to its workers.
SELECTION = pytest.StashKey[str]()

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The KV tensors of the suites are tiny: torch's intra-op thread pool only spins, and with two xdist workers on two
# cores it nearly doubled the connector suite's CPU time. Set before anything imports torch; processes the tests
# start inherit it.
os.environ.setdefault("OMP_NUM_THREADS", "1")

# The test command starts some eighty Python processes (xdist workers; pytest and kvconform runs in tests/,
# where a fresh process is the evidence): they share compiled bytecode (harness.bytecode).
share_bytecode()

# Registered early, so it runs after the atexit handlers of what the session imports later: the interpreter's exit
# collections then skip the heap (tests.interpreter_exit), which kept each xdist worker alive about 3 s after its
# last test.
freeze_heap_at_exit()


def pytest_addoption(parser):
    """The gate's two options (tests/gate.toml): the README test command runs the gate."""
    group = parser.getgroup("kvconform-gate", "kvconform's own tests: the gate and the full run (tests/gate.toml)")
    group.addoption("--full", action="store_true",
                    help="run every test, the ones the gate defers to the full run included")
    group.addoption("--deferred-only", action="store_true",
                    help="run only what the gate defers (CI runs the gate, then this)")


def pytest_configure(config):
    """Work stealing by default, and the selection of tests this run makes."""
    steal_work_by_default(config)
    _choose_selection(config)


def steal_work_by_default(config):
    """`-n N` without `--dist` steals work: xdist's default "load" schedule hands each worker its share up
    front, and this repository's tests range from 1 ms matrix cells to 30 s end-to-end runs, so one worker
    used to sit idle for two minutes while the other worked through a queue of slow tests."""
    args = config.invocation_params.args
    if getattr(config.option, "dist", "no") == "load" and not any(a == "-d" or a.startswith("--dist") for a in args):
        config.option.dist = "worksteal"


def _choose_selection(config):
    """A plain `pytest` (paths from testpaths, no -k or -m) runs the gate; one that names what it wants runs
    that. An xdist worker takes its controller's choice, since it gets the controller's paths as arguments."""
    if hasattr(config, "workerinput"):
        selection = config.workerinput.get("kvconform_selection", ALL)
    else:
        from_testpaths = (config.args_source == pytest.Config.ArgsSource.TESTPATHS
                          and not config.option.keyword and not config.option.markexpr)
        try:
            selection = selection_for(config.option.full, config.option.deferred_only, from_testpaths)
        except ValueError as error:
            raise pytest.UsageError(str(error)) from None
    config.stash[SELECTION] = selection
    if selection == GATE:
        cap_searches()
        # one item per era: every cell still judged, the failing ones named (tests.gate)
        config.option.kvconform_matrix_items = "era"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """Hand the controller's selection to an xdist worker."""
    node.workerinput["kvconform_selection"] = node.config.stash[SELECTION]


def pytest_collection_modifyitems(config, items):
    """Leave out, as deselected, what this run's selection does not run."""
    selection = config.stash.get(SELECTION, ALL)
    if selection == ALL:
        return
    table = GateTable.load()
    kept, left = [], []
    for item in items:
        (kept if table.runs_in(item.nodeid, selection) else left).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


def pytest_report_header(config):
    """Say which selection ran, so a deselected count is never a puzzle."""
    selection = config.stash.get(SELECTION, ALL)
    if selection == GATE:
        return ("kvconform: the gate; the tests of tests/gate.toml's [deferred] modules are left to "
                "`pytest -n 2 --full` (CI runs them with --deferred-only)")
    if selection != ALL:
        return "kvconform: only the tests the gate defers (tests/gate.toml), searches at full depth"
    return None
