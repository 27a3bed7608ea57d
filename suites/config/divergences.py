"""Known divergences between a named config target and the oracle (`known_divergences.toml`), as data."""

from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass
from pathlib import Path

DIVERGENCES_FILE = Path(__file__).with_name("known_divergences.toml")


@dataclass(frozen=True)
class Divergence:
    """One reviewed disagreement: which target, who is wrong, why, and the source line that shows it."""

    target: str
    who: str
    reason: str
    source: str

    def describe(self) -> str:
        """The xfail reason the report shows."""
        return f"known divergence ({self.who} is wrong): {' '.join(self.reason.split())} [{self.source}]"


@functools.lru_cache(maxsize=None)
def _by_cell(path: Path = DIVERGENCES_FILE) -> dict[tuple[str, str], Divergence]:
    entries = tomllib.loads(path.read_text()).get("divergence", [])
    table: dict[tuple[str, str], Divergence] = {}
    for entry in entries:
        if entry["who"] not in ("spec", "target"):
            raise ValueError(f"{path.name}: who = {entry['who']!r}; accepted: 'spec', 'target'")
        divergence = Divergence(entry["target"], entry["who"], entry["reason"], entry["source"])
        for cell in entry["cells"]:
            table[(entry["target"], cell)] = divergence
    return table


def known_divergence(target: str, cell_id: str) -> Divergence | None:
    """The recorded divergence of `target` (as named on the command line) for a cell, if any."""
    return _by_cell().get((target, cell_id))
