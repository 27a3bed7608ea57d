"""Which era's `v1/core` the reference allocator follows where two releases differ.

The reference follows the newest era it knows. A few observable shapes changed between releases in ways one
object cannot serve at once; each is a `Shape` below, named by the first era that has it, and the allocator
modules ask `follows(SHAPE)`:
- vLLM 0.34's prefix-cache map holds block ids (`_cache` maps a key to one block id, `_dup_ids` keeps the keys
  several blocks share), 0.33's held the blocks themselves (a key maps to a block, or to `{block_id: block}` once
  a second block shared it, and stays a dict);
- from 0.34 prompt scoring with cache reads allowed reads only the rows before the first scored one
  (`prompt_logprob_start`); before, a request skipped the prefix cache or read all of it;
- HiSparse's host pool: 0.34 reserves, against later admissions, the host pages an admitted asynchronous import
  has yet to allocate, 0.33 admitted an import when its own prompt's pages fit.
Every other behaviour is the same on every supported release.

A shape that one name in vLLM's code shows (a class, a method, an attribute) says that name and the capability
it is: the vLLM allocator target's capability table (`harness.targets.allocator.capabilities`) probes each such
name in the release under test, as it probes every other capability, so the checks that need the shape are "N/A"
on a release without it and a new shape is declared here alone.

Code written against an older release (its own tests, an out-of-tree scheduler) selects that release with
$KVCONFORM_ALLOCATOR_RELEASE (`0.33`, `0.33.0` or `v0.33`); `harness.upstream` sets it to the release whose tests
it runs. The release is placed on the one release axis by the release registry (`reference_impl.releases`: its
era), the same era `--vllm-version` selects for config resolution; this module cannot import the config package
(which imports the allocator), so the registry, not `reference_impl.config.eras`, answers here.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache

from reference_impl import releases

__all__ = ["ENV_VAR", "NEWEST", "OLDEST", "Shape", "SHAPES", "PREFIX_CACHE_HOLDS_BLOCK_IDS",
           "PROMPT_LOGPROB_START_HITS", "RESERVES_IMPORT_PAGES", "allocator_era", "follows", "parse_release"]

ENV_VAR = "KVCONFORM_ALLOCATOR_RELEASE"
#: The newest era the reference follows (the default): the registry's newest row's.
NEWEST = releases.RELEASES[-1].era
#: The oldest era the reference can present itself as.
OLDEST = "seed"


@dataclass(frozen=True)
class Shape:
    """An allocator behaviour that changed: the first era that has it and, where one name in vLLM's code shows it,
    the capability it is for the checks (`needs` marks), that name and what a release without it lacks."""

    first_era: str
    capability: str | None = None
    #: "MODULE:ATTRIBUTE.PATH", MODULE as vLLM names it under `vllm.` (`v1.hisparse.coordinator`): present in the
    #: code of a release that has the shape (the reference's included), absent before.
    seen_at: str | None = None
    #: Completes "N/A on X.Y.Z: ..." for a release without it.
    lacks: str | None = None

    def __post_init__(self) -> None:
        if (self.capability is None) != (self.seen_at is None) or (self.capability is None) != (self.lacks is None):
            raise ValueError(f"Shape {self.first_era}: capability, seen_at and lacks go together")


#: Each allocator behaviour that changed (reviewed data: the vLLM source of each is cited where the allocator
#: reads it).
PREFIX_CACHE_HOLDS_BLOCK_IDS = Shape("v0.34")
PROMPT_LOGPROB_START_HITS = Shape("v0.34")
RESERVES_IMPORT_PAGES = Shape(
    "v0.34", capability="hisparse_import_reservation",
    seen_at="v1.hisparse.coordinator:HiSparseCoordinator.reserved_import_pages",
    lacks="HiSparseCoordinator has no reserved_import_pages (an asynchronous import is admitted when its own "
          "prompt's host pages fit, whatever earlier imports still need)")
#: Every shape of this module, oldest first.
SHAPES: tuple[Shape, ...] = (PREFIX_CACHE_HOLDS_BLOCK_IDS, PROMPT_LOGPROB_START_HITS, RESERVES_IMPORT_PAGES)

_SPELLING = re.compile(r"^[vV]?(\d+)\.(\d+)(?:\.(\d+))?$")


def _minor_text(era: str) -> str:
    """'0.13': the major.minor of the era's first row (for the accepted-values text)."""
    first = next(row for row in releases.RELEASES if row.era == era)
    return first.version.rsplit(".", 1)[0]


@lru_cache(maxsize=64)
def parse_release(text: str, field: str = ENV_VAR) -> str:
    """The era of a release written `0.33`, `0.33.0` or `v0.33` (a release newer than the registry's gets the
    newest era's behaviour); ValueError naming `field`."""
    match = _SPELLING.match(text.strip())
    era = None
    if match:
        try:
            era = releases.row_for(f"{match[1]}.{match[2]}.{match[3] or 0}").era
        except releases.RegistryError:  # older than every row
            era = None
    if era is None or not releases.era_at_least(era, OLDEST):
        raise ValueError(f"{field}: {text!r} is not a vLLM release the reference follows "
                         f"(accepted: X.Y or X.Y.Z from {_minor_text(OLDEST)}; newer ones get "
                         f"{_minor_text(NEWEST)}'s behaviour)")
    return era


def allocator_era() -> str:
    """The era selected by $KVCONFORM_ALLOCATOR_RELEASE, else NEWEST (read at each pool's construction)."""
    text = os.environ.get(ENV_VAR)
    return NEWEST if not text else parse_release(text)


def follows(shape: Shape, era: str | None = None) -> bool:
    """Whether the allocator (`era`, default the selected one) follows `shape` (its first era or later)."""
    return releases.era_at_least(era or allocator_era(), shape.first_era)
