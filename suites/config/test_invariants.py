"""The config invariants (docs/invariants.md) on the config target, per (invariant, era).

Every cell of the era's matrix and every reviewed defect's witness go through the target (`--hma-target`, default
the reference resolver at the era's rules), once per era and process. An (invariant, era) that a reviewed vLLM
defect covers is a strict xfail: the defect disappearing is news, and a violation no covering defect explains fails
outright; every other (invariant, era) must hold. The release judged is the target's own when it is an installed
vLLM (`vllm`), else the era's first release: a target that follows an era's rules shares that era's defects.
"""

from __future__ import annotations

import pytest

from harness.eras import ERA_IDS
from harness.invariants.config import INVARIANTS_BY_ID
from harness.plugins.config_matrix import config_target, selected_eras
from suites.config.invariants import era_judgement

PAIRS = [(invariant, era) for era in ERA_IDS for invariant in INVARIANTS_BY_ID]


def pytest_generate_tests(metafunc):
    if "invariant_era" in metafunc.fixturenames:
        eras = selected_eras(metafunc.config)
        pairs = [pair for pair in PAIRS if pair[1] in eras]  # era-major: a worker's share needs few eras
        metafunc.parametrize("invariant_era", pairs, ids=[f"{inv}-{era}" for inv, era in pairs])


def test_config_invariant(invariant_era, hma_target, request):
    """One invariant on one era's cells: it holds, or breaks exactly as its reviewed defects say (strict xfail)."""
    invariant, era = invariant_era
    judgement = era_judgement(era, hma_target)
    if not judgement.answered:
        pytest.skip(f"the target ({config_target(request.config).spec}) answers none of era {era}'s cells")
    verdict = judgement.verdicts[invariant]
    if verdict.unexplained:
        first = verdict.unexplained[0]
        pytest.fail(f"{invariant} is violated on {len(verdict.unexplained)} case(s) no reviewed defect explains, first "
                    f"{first.case_id}: {first.detail}", pytrace=False)
    if verdict.silent and verdict.violations:
        pytest.fail(f"reviewed defect(s) {[d.id for d in verdict.silent]} no longer break {invariant} in {era}: news, "
                    "review harness/release/vllm_config_defects.toml", pytrace=False)
    if verdict.defects:
        request.applymarker(pytest.mark.xfail(strict=True, reason="; ".join(d.marker() for d in verdict.defects)))
    assert not verdict.violations, (f"{invariant} ({INVARIANTS_BY_ID[invariant].sentence}) is violated in {era} on "
                                    f"{len(verdict.violations)} case(s), first {verdict.violations[0].case_id}: "
                                    f"{verdict.violations[0].detail}")
