"""The allocator invariants (`invariants.py`, ids INV-KV-NN), judged on seeded random traffic over real layouts.

One cell per invariant and layout. The workload runs once per layout and target in a process (every seed of
`SEEDS`); each cell asserts that its invariant held on every step. On a vLLM release a cell that a reviewed
defect explains (`harness/release/vllm_allocator_defects.toml`) is a strict xfail: it still runs every check,
and a release on which the defect stops showing (or a cell that starts failing) is news in CI.
"""

from __future__ import annotations

import pytest

from harness.release.allocator_findings import defect_for_cell
from suites.allocator.invariants import INVARIANTS, LAYOUTS, run_workload

SECTION = "2.8"

#: Seeds and steps per layout: cheap enough for the README test command (about a second per layout).
SEEDS = (1, 2)
NUM_STEPS = 150

_VERDICTS: dict[tuple[str, str], object] = {}


def _verdicts(target, layout: str):
    """Every seed's verdict for `layout` on `target`, computed once per process (a skip when the target lacks
    what the layout needs is remembered and repeated)."""
    key = (target.name, layout)
    if key not in _VERDICTS:
        try:
            _VERDICTS[key] = [run_workload(target, LAYOUTS[layout], seed, NUM_STEPS) for seed in SEEDS]
        except pytest.skip.Exception as exc:
            _VERDICTS[key] = exc
    found = _VERDICTS[key]
    if isinstance(found, pytest.skip.Exception):
        raise found  # the same skip, with the typed record it carries (harness.outcomes)
    return found


def release_of(target) -> str | None:
    """The vLLM release a target is (`vllm-X.Y.Z`), None for any other target."""
    return target.name.removeprefix("vllm-") if target.name.startswith("vllm-") else None


@pytest.mark.parametrize("invariant,layout", [(i, name) for i in INVARIANTS for name in LAYOUTS],
                         ids=[f"{i}-{name}" for i in INVARIANTS for name in LAYOUTS])
def test_invariant(target, invariant, layout, request):
    release = release_of(target)
    defect = defect_for_cell(invariant, layout, release) if release else None
    if defect is not None:
        request.applymarker(pytest.mark.xfail(strict=True, reason=defect.describe()))
    verdicts = _verdicts(target, layout)
    broken = [f"seed {seed}: {v.violations[invariant]}" for seed, v in zip(SEEDS, verdicts)
              if invariant in v.violations]
    assert not broken, f"{invariant} ({INVARIANTS[invariant].sentence}) violated on {layout}: " + "; ".join(broken)
