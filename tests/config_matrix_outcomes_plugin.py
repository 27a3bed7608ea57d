"""A pytest plugin (`-p tests.config_matrix_outcomes_plugin`) for tests/test_config_matrix_mutants.py: two reviewed
divergences of `tests.config_mutants:breaks_cells_every_way`, as `suites/config/known_divergences.toml` would give
them: one on a cell the mutant breaks (a strict xfail that holds) and one on a cell it gets right (a strict XPASS,
which fails). The shipped table has none for a mutant, and a test must not edit it."""

from __future__ import annotations

import suites.config.divergences as divergences
import suites.config.test_matrix as test_matrix

TARGET = "tests.config_mutants:breaks_cells_every_way"
BROKEN_CELL = "seed-F-cuda-kv_events-noconn"  # the mutant ignores kv_events
RIGHT_CELL = "seed-N-cuda-none-noconn"  # the mutant gets it right
_DIVERGENCE = divergences.Divergence(TARGET, "target", "a divergence this test declares",
                                     "tests/config_matrix_outcomes_plugin.py")
_TABLE = {(TARGET, BROKEN_CELL): _DIVERGENCE, (TARGET, RIGHT_CELL): _DIVERGENCE}


def pytest_configure(config):
    shipped = test_matrix.known_divergence
    test_matrix.known_divergence = lambda target, cell_id: _TABLE.get((target, cell_id)) or shipped(target, cell_id)
