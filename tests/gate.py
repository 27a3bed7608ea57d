"""The gate: which of kvconform's own tests the README test command runs, and which it leaves to the full run.

`pytest -n 2` with no paths runs the gate; `--full` runs every test; `--deferred-only` runs what the gate leaves
out (CI runs the gate, then that). A run that names paths or `--pyargs` runs what it names, like plain pytest.
In the gate the config matrix is one item per era (`--config-matrix-items era`): every cell is judged as in the
full run and each failing cell is named, with 17 items for pytest and xdist to carry instead of 31,674.
The data is tests/gate.toml, reviewed; this module only reads it and selects."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

GATE_FILE = Path(__file__).with_name("gate.toml")

#: The selections, by the name `pytest_configure_node` hands an xdist worker.
GATE, DEFERRED, ALL = "gate", "deferred", "all"


@dataclass(frozen=True)
class GateTable:
    """The reviewed table: modules the gate defers, and Hypothesis searches it runs at reduced depth."""

    deferred: dict[str, str]
    searched: dict[str, str]

    @classmethod
    def load(cls, path: Path = GATE_FILE) -> "GateTable":
        """Read tests/gate.toml; an unknown section is an error naming it and the accepted ones."""
        data = tomllib.loads(path.read_text())
        unknown = set(data) - {"deferred", "searched"}
        if unknown:
            raise ValueError(f"{path.name}: section(s) {sorted(unknown)} not accepted; expected 'deferred', 'searched'")
        return cls(deferred=dict(data.get("deferred", {})), searched=dict(data.get("searched", {})))

    def runs_in(self, nodeid: str, selection: str) -> bool:
        """Whether the test `nodeid` (pytest's: a path relative to the repository root, then `::` and the test's
        name) runs under `selection`. An entry names a module, or one test function of it (every parameter); the
        deferred run runs a searched entry again, at full depth."""
        if selection == ALL:
            return True
        module, _, name = nodeid.partition("::")
        function = f"{module}::{name.split('[', 1)[0]}"
        deferred = module in self.deferred or function in self.deferred
        if selection == GATE:
            return not deferred
        return deferred or module in self.searched or function in self.searched


def selection_for(full: bool, deferred_only: bool, from_testpaths: bool) -> str:
    """The selection a controller (or a run without xdist) makes from its options and how it got its paths."""
    if full and deferred_only:
        raise ValueError("--full and --deferred-only: choose one (--full runs every test, --deferred-only what "
                         "the gate leaves out)")
    if deferred_only:
        return DEFERRED
    if full or not from_testpaths:
        return ALL
    return GATE


def cap_searches(environ: dict[str, str] = os.environ) -> None:
    """In the gate, the Hypothesis searches run as many examples as `kvconform report` runs on the reference
    allocator (`capped_examples` reads the variable), unless the caller set a cap of its own."""
    # Imported here: harness.report is heavy, and only the gate needs it.
    from harness.report.passes import REPORT_STATE_MACHINE_EXAMPLES, STATE_MACHINE_EXAMPLES_ENV

    environ.setdefault(STATE_MACHINE_EXAMPLES_ENV, REPORT_STATE_MACHINE_EXAMPLES)
