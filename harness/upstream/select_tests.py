"""pytest plugin: run only the tests listed in the file named by `$KVCONFORM_UPSTREAM_SELECT`, and none of those
listed in the file named by `$KVCONFORM_UPSTREAM_EXCLUDE`.

The upstream job's reference run only needs the tests that passed on vLLM (the others are excluded from
the comparison anyway, and they are the slow ones: weights that are not there, servers that do not start),
so it lists their node ids, one per line, and this plugin deselects every other collected test. Its vLLM run
leaves out the tests that cannot pass on vLLM there (`harness.upstream.not_on_cpu`); the node ids it left out
are written to the exclusion file's name plus `.dropped` (the runner records them as not run).
"""

from __future__ import annotations

import os
from pathlib import Path

from harness.atomic_write import write_text_atomic

__all__ = ["ENV", "EXCLUDE_ENV", "DROPPED_SUFFIX", "pytest_collection_modifyitems"]

ENV = "KVCONFORM_UPSTREAM_SELECT"
EXCLUDE_ENV = "KVCONFORM_UPSTREAM_EXCLUDE"
DROPPED_SUFFIX = ".dropped"


def _ids(listing: str) -> set[str]:
    return set(Path(listing).read_text(encoding="utf-8").split("\n")) - {""}


def pytest_collection_modifyitems(config, items) -> None:
    """Keep the listed node ids (all tests when the variable is unset), less the excluded ones."""
    listing, excluding = os.environ.get(ENV), os.environ.get(EXCLUDE_ENV)
    wanted = _ids(listing) if listing else None
    unwanted = _ids(excluding) if excluding else set()
    kept = [item for item in items if (wanted is None or item.nodeid in wanted) and item.nodeid not in unwanted]
    dropped = [item for item in items if item not in kept]
    if excluding:  # every xdist worker collects the same tests and writes the same list
        write_text_atomic(Path(excluding + DROPPED_SUFFIX),
                          "".join(f"{item.nodeid}\n" for item in items if item.nodeid in unwanted))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
