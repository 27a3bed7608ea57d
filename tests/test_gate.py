"""The gate's reviewed table (tests/gate.toml) and its selection: what the README test command runs."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gate import ALL, DEFERRED, GATE, GateTable, selection_for

ROOT = Path(__file__).resolve().parent.parent


def test_every_entry_names_a_test_module_that_exists():
    table = GateTable.load()
    for entry in [*table.deferred, *table.searched]:
        module, _, function = entry.partition("::")
        path = ROOT / module
        assert path.is_file() and path.name.startswith("test_"), (
            f"tests/gate.toml names {entry!r}, which is not in a test module of this repository: a renamed or "
            "removed module must leave the table (or its tests would silently join the gate)")
        assert not function or f"def {function}(" in path.read_text(), (
            f"tests/gate.toml names {entry!r}, but {module} defines no test function {function!r}")
    assert not set(table.deferred) & set(table.searched), "a module is either deferred or searched, not both"


def test_every_entry_says_why():
    table = GateTable.load()
    for module, reason in [*table.deferred.items(), *table.searched.items()]:
        assert reason.strip(), f"tests/gate.toml: {module!r} has no reason; each entry says why it is there"


@pytest.mark.parametrize(("full", "deferred_only", "from_testpaths", "expected"), [
    (False, False, True, GATE),       # the README test command
    (True, False, True, ALL),         # pytest --full
    (False, True, True, DEFERRED),    # CI's second run
    (False, False, False, ALL),       # pytest tests/x.py, --pyargs, -k or -m: what the user names
    (False, True, False, DEFERRED),
])
def test_selection(full, deferred_only, from_testpaths, expected):
    assert selection_for(full, deferred_only, from_testpaths) == expected


def test_full_and_deferred_only_together_is_refused():
    with pytest.raises(ValueError, match="--full and --deferred-only"):
        selection_for(True, True, True)


def test_gate_and_deferred_run_split_every_module_and_both_run_the_searches():
    table = GateTable(deferred={"tests/a.py": "processes", "tests/c.py::test_slow": "a process"},
                      searched={"suites/s.py": "search", "tests/d.py::test_search": "a search"})
    assert not table.runs_in("tests/a.py::test_x", GATE) and table.runs_in("tests/a.py::test_x", DEFERRED)
    assert table.runs_in("tests/b.py::test_x", GATE) and not table.runs_in("tests/b.py::test_x", DEFERRED)
    assert table.runs_in("suites/s.py::test_x[p]", GATE) and table.runs_in("suites/s.py::test_x[p]", DEFERRED)
    assert not table.runs_in("tests/c.py::test_slow[1-2]", GATE), "an entry naming a function covers its parameters"
    assert table.runs_in("tests/c.py::test_slower", GATE) and table.runs_in("tests/c.py::test_quick", GATE)
    assert table.runs_in("tests/c.py::test_slow", DEFERRED) and not table.runs_in("tests/c.py::test_quick", DEFERRED)
    assert table.runs_in("tests/d.py::test_search", GATE) and table.runs_in("tests/d.py::test_search", DEFERRED)
    assert table.runs_in("tests/d.py::test_other", GATE) and not table.runs_in("tests/d.py::test_other", DEFERRED), \
        "a searched entry naming a function brings only that function into the deferred run"
    assert all(table.runs_in(n, ALL) for n in ("tests/a.py::t", "tests/b.py::t", "suites/s.py::t"))


def test_unknown_section_is_named(tmp_path):
    bad = tmp_path / "gate.toml"
    bad.write_text('[skipped]\n"tests/a.py" = "x"\n')
    with pytest.raises(ValueError, match=r"\['skipped'\] not accepted; expected 'deferred', 'searched'"):
        GateTable.load(bad)


def test_a_plain_run_is_the_gate_and_full_runs_everything(tmp_path):
    """End to end on a small tree: the repository's conftest decides from how pytest got its paths."""
    (tmp_path / "conftest.py").write_text((ROOT / "conftest.py").read_text())
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    for module in ("gate.py", "interpreter_exit.py"):  # what the conftest imports from tests/
        (tmp_path / "tests" / module).write_text((ROOT / "tests" / module).read_text())
    (tmp_path / "tests" / "gate.toml").write_text('[deferred]\n"tests/test_slow.py" = "starts processes"\n')
    (tmp_path / "tests" / "test_slow.py").write_text("def test_slow():\n    pass\n")
    (tmp_path / "tests" / "test_quick.py").write_text("def test_quick():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")

    def run(*args):
        done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args], cwd=tmp_path,
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"})
        return done.stdout.strip().splitlines()[-1]

    assert run().startswith("1 passed, 1 deselected"), "a plain run is the gate: the deferred module is left out"
    assert run("--full").startswith("2 passed"), "--full runs the deferred module too"
    assert run("tests/test_slow.py").startswith("1 passed"), "a run that names a deferred module runs it"
    assert run("--deferred-only").startswith("1 passed, 1 deselected"), "--deferred-only runs what the gate leaves"
