"""The config invariants (`harness.invariants.config`) and the reviewed vLLM defects that break them.

The per-(invariant, era) judgement of the config target is a suite test (`suites/config/test_invariants.py`, strict
xfail where a reviewed defect covers it). Here: each invariant can fail (a deliberately broken resolver from
`tests/config_mutants.py` trips it on a few cases where the reference holds it), each defect's witness breaks its
invariants on exactly the releases it covers, the defects file refuses malformed entries, and the docs list them all.
"""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.eras import ERA_IDS
from harness.invariants.config import INVARIANTS, INVARIANTS_BY_ID, Memo, check_case, evaluate
from harness.invariants.defects import load_defects
from reference_impl.config import ERAS_BY_ID, resolve_case
from reference_impl.vocabulary import CASE_DEFAULTS
from tests import config_mutants as M

CHUNKED_ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"


def test_there_are_at_least_twelve_invariants_each_with_an_id_and_one_sentence():
    assert len(INVARIANTS) >= 12
    for invariant in INVARIANTS:
        assert invariant.id.startswith("INV-CFG-") and invariant.sentence.endswith(".")
        assert invariant.sentence.count(". ") == 0, f"{invariant.id}: one sentence, not several"


@pytest.mark.parametrize("defect", load_defects(), ids=lambda d: d.id)
def test_the_witness_breaks_its_invariants_on_exactly_the_covered_eras(defect):
    resolve = Memo(resolve_case)
    invariants = [INVARIANTS_BY_ID[i] for i in defect.invariants]
    wrong = []
    for era in ERA_IDS:
        shown = any(defect.explains(v) for case in defect.witness_cases(era)
                    for v in check_case(case, resolve(case), resolve, invariants))
        if shown != defect.covers_era(ERAS_BY_ID[era]):
            wrong.append(f"{era}: {'violated' if shown else 'holds'}")
    assert not wrong, f"{defect.id}'s witness disagrees with its releases ({defect.first_affected}..{defect.fixed_in}): {wrong}"


def _case(era: str, **fields) -> dict:
    return {**CASE_DEFAULTS, "id": f"mutant-{era}", "profile": era, "stage": "config", **fields}


# invariant -> (a broken resolver, the resolver that holds it on the same cases, era, cases)
_V033 = "v0.33"
BROKEN: dict[str, tuple] = {
    "INV-CFG-01": (M.absent_fails_for_connectors, resolve_case, _V033, [{"kv_connector": "NixlConnector", "stage": "create_connector"}]),
    "INV-CFG-02": (M.absent_refuses_chunked, resolve_case, _V033, [{"attention_chunk_size": 8192, "env": {CHUNKED_ENV: "1"}}]),
    "INV-CFG-03": (M.ignores_disable, resolve_case, _V033, [{"flag": True}]),
    "INV-CFG-04": (M.ignores_enable, resolve_case, _V033, [{"flag": False}]),
    # every release with an explicit enable breaks it (VLLM-CFG-04): the broken resolver is the reference itself
    "INV-CFG-05": (resolve_case, M.names_the_cause, _V033, [{"flag": False, "attention_chunk_size": 8192, "env": {CHUNKED_ENV: "0"}}]),
    "INV-CFG-06": (M.events_disable_hma, resolve_case, _V033, [{"kv_events": True}]),
    "INV-CFG-07": (M.offloading_turns_hma_off, resolve_case, _V033, [{"kv_offloading_backend": "native", "kv_offloading_size": 4.0}]),
    "INV-CFG-08": (M.connectors_disable_hma, resolve_case, _V033, [{"kv_connector": "NixlConnector"}]),
    "INV-CFG-09": (M.factory_refuses_everything, resolve_case, _V033, [{"flag": False, "kv_connector": "NixlConnector"}]),
    "INV-CFG-10": (M.connectors_never_disable, resolve_case, _V033, [{"kv_connector": "ExampleConnector"}]),
    "INV-CFG-11": (M.ignores_platform, resolve_case, _V033, [{"platform": "unspecified"}]),
    "INV-CFG-12": (M.role_matters, resolve_case, _V033, [{"kv_connector": "NixlConnector"}]),
    "INV-CFG-13": (M.hints_a_missing_flag, resolve_case, "seed", [{"flag": False, "kv_events": True}]),
    "INV-CFG-14": (M.silent_disable, resolve_case, _V033, [{"attention_chunk_size": 8192, "env": {CHUNKED_ENV: "0"}}]),
    "INV-CFG-15": (M.warns_but_keeps_hma, resolve_case, _V033, [{"kv_connector": "NixlConnector"}]),
    "INV-CFG-16": (M.creation_flips_the_decision, resolve_case, _V033, [{}]),
    "INV-CFG-17": (M.ignores_the_env_opt_in, resolve_case, _V033, [{"attention_chunk_size": 8192, "env": {CHUNKED_ENV: "1"}}]),
}


def test_every_invariant_has_a_broken_resolver():
    assert set(BROKEN) == set(INVARIANTS_BY_ID)


@pytest.mark.parametrize("invariant", sorted(BROKEN))
def test_a_broken_resolver_trips_the_invariant(invariant):
    broken, holding, era, fields = BROKEN[invariant]
    cases = [_case(era, **f) for f in fields]
    tripped = [v for v in evaluate(cases, broken, [INVARIANTS_BY_ID[invariant]])]
    assert tripped, f"{invariant}: {broken.__name__} breaks it on {fields}, yet the check found nothing"
    held = evaluate(cases, holding, [INVARIANTS_BY_ID[invariant]])
    assert not held, f"{invariant}: {holding.__name__} should hold it on the same cases: {held[0].detail}"


def test_a_malformed_defect_is_one_line_naming_the_field(tmp_path):
    path = tmp_path / "defects.toml"
    path.write_text('[[defect]]\nid = "X"\ninvariants = ["INV-CFG-99"]\nsentence = "s"\nfirst_affected = "0.13.0"\n'
                    'fixed_in = ""\nrules = []\nwitness = {}\nsource = []\nupstream = ""\n')
    with pytest.raises(UsageError, match=r"defect 1: invariants: \['INV-CFG-99'\] not accepted"):
        load_defects(path)
    path.write_text(path.read_text().replace("INV-CFG-99", "INV-CFG-01").replace('"0.13.0"', '"0.15.0"'))
    with pytest.raises(UsageError, match="first_affected: '0.15.0' is inside an era"):
        load_defects(path)


def test_the_docs_page_lists_every_invariant_and_defect():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "invariants.md").read_text(encoding="utf-8")
    missing = [inv.id for inv in INVARIANTS if f"| {inv.id} |" not in page]
    missing += [d.id for d in load_defects() if f"| {d.id} |" not in page or (d.fixed_in_text or "not fixed") not in page]
    assert not missing, f"docs/invariants.md does not list {missing}"
