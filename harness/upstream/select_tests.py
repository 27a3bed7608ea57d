"""pytest plugin: run only the tests listed in the file named by `$KVCONFORM_UPSTREAM_SELECT`.

The upstream job's reference run only needs the tests that passed on vLLM (the others are excluded from
the comparison anyway, and they are the slow ones: weights that are not there, servers that do not start),
so it lists their node ids, one per line, and this plugin deselects every other collected test.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["ENV", "pytest_collection_modifyitems"]

ENV = "KVCONFORM_UPSTREAM_SELECT"


def pytest_collection_modifyitems(config, items) -> None:
    """Keep the listed node ids (all tests when the variable is unset)."""
    listing = os.environ.get(ENV)
    if not listing:
        return
    wanted = set(Path(listing).read_text(encoding="utf-8").split("\n")) - {""}
    kept = [item for item in items if item.nodeid in wanted]
    dropped = [item for item in items if item.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
