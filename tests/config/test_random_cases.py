"""The random differential's cases and its comparison (harness.random_cases, harness.differential), without vLLM."""

from __future__ import annotations

import pytest

from harness.differential import coverage, differences
from harness.random_cases import CaseGenerator
from reference_impl.config import resolve_case


@pytest.mark.parametrize(("era", "version"), [("v0.34", "0.34.0"), ("v0.33", "0.33.0"), ("seed", "0.13.0")])
def test_cases_are_reproducible_and_follow_the_schema(era, version):
    first, again = CaseGenerator(era, version, 7).cases(300), CaseGenerator(era, version, 7).cases(300)
    assert first == again, "a (seed, number) pair always gives the same case"
    assert CaseGenerator(era, version, 8).cases(5) != first[:5], "another seed, other cases"
    assert CaseGenerator(era, version, 7).cases(3, start=10) == first[10:13], "a sequence can be resumed"
    for case in first:
        outcome = resolve_case(dict(case))
        stage = (outcome["error"] or {}).get("stage")
        assert stage not in ("input", "internal"), f"{case}: {outcome['error']}"


def test_cases_cover_the_0_34_dimensions():
    seen = {}
    for case in CaseGenerator("v0.34", "0.34.0", 34).cases(400):
        for name in coverage(case):
            seen[name] = seen.get(name, 0) + 1
    for name in ("extra_config", "nixl_transfer_mode", "hisparse_host_pool", "custom_speculative_method",
                 "speculative_method_name", "grandchildren", "multi_connector", "offloading"):
        assert seen.get(name, 0) >= 10, f"only {seen.get(name, 0)} of 400 cases exercise {name}"


def _outcome(**fields):
    base = {"id": 1, "resolved_disable_hma": None, "warnings": [], "error": None, "rules": [], "unknown": None}
    return {**base, **fields}


def test_differences_compare_every_outcome_field_but_rules():
    on = _outcome(resolved_disable_hma=False, rules=["a"])
    assert differences(on, _outcome(resolved_disable_hma=False, rules=["b"])) == []
    assert differences(on, _outcome(resolved_disable_hma=True)) == ["resolved_disable_hma: resolver False, vllm True"]
    warned = _outcome(resolved_disable_hma=False, warnings=["W"])
    assert [d.split(":")[0] for d in differences(on, warned)] == ["warnings"]
    error = {"type": "ValueError", "message": "m", "stage": "config"}
    assert [d.split(":")[0] for d in differences(_outcome(error=error), _outcome(error={**error, "stage": "create_connector"}))] == ["error"]
    assert differences(_outcome(unknown="why"), _outcome(unknown="another reason")) == []
    assert differences(_outcome(unknown="why"), on)[0].startswith("unknown:")
    assert differences(on, _outcome(unknown="not evaluable here"))[0].startswith("unknown:")
