"""Every case key that can stand against HMA is a cause the invariants know (`harness.invariants.config._causes`).

INV-CFG's "an explicit enable is refused with an error that names its cause" reads the causes present in a case
from `_causes`; a key missing there leaves the invariant nothing to ask for, so it holds vacuously on that key's
cases. Which keys stand against HMA is not read from `_causes` here: every value a case key takes on its own (a
simple key's `CaseKey.given()`, each config matrix feature of the era, each platform, each connector the era
registers) is resolved by the reference resolver, whose era tables say what each release does; a value that keeps
HMA from being on there (an explicit enable refused with one of the HMA errors below, or an absent flag resolved to
HMA off where the plain case has it on) must give `_causes` something to name. A new key no value covers fails the
coverage test until its standing-alone value is drawn somewhere or it is reviewed as no input of its own.
"""

from __future__ import annotations

import pytest

from harness.invariants.config import Memo, _causes, probe
from reference_impl.config import ERAS_BY_ID, resolve_case
from reference_impl.vocabulary import CASE_DEFAULTS, CASE_KEYS, PLATFORMS
from suites.config.matrix import ALONE_CONNECTORS, features_for

#: The message ids of "HMA is on and cannot be" (reviewed against docs/rules.md): the explicit enable refused
#: (E-B; E-C in the 0.33 spelling), the connector factory's refusal (E-F), MultiConnector's assert.
HMA_REFUSED = frozenset({"E-B", "E-C", "E-F", "E-MULTI-ASSERT"})
#: Keys that are no input that stands on its own (reviewed): what the case is and how it is run, and the parts of
#: a connector configuration, which stand with the connector they configure (the connector is a cause whatever
#: its parts say).
NOT_ALONE = frozenset({"id", "vllm_version", "profile", "stage", "flag", "cli_args", "layers", "kv_role",
                       "kv_connector_module_path", "multi_connector_children", "kv_connector_extra_config"})


def standing_alone(era_id: str) -> dict[str, dict]:
    """Label -> the fields of a case that sets one input on its own, in `era_id`."""
    alone = {f"key {key}": {key: spec.given()} for key, spec in CASE_KEYS.items() if spec.simple}
    alone.update({f"feature {name}": fields for name, fields in features_for(era_id).items()})
    alone.update({f"platform {platform}": {"platform": platform} for platform in PLATFORMS})
    alone.update({f"connector {name}": {"kv_connector": name} for name in ERAS_BY_ID[era_id].connectors()})
    alone.update({f"connector {name}": fields for name, fields in ALONE_CONNECTORS.items()})
    return alone


def _case(era_id: str, flag: bool | None, fields: dict, label: str) -> dict:
    return {**CASE_DEFAULTS, "vllm_version": era_id, "flag": flag, "stage": "create_connector", **fields,
            "id": label}


def uncaused(era_id: str, resolve=None, causes=_causes) -> list[str]:
    """The standing-alone inputs of `era_id` that keep HMA from being on while `causes` names nothing."""
    resolve = resolve or Memo(resolve_case)
    plain_off = resolve(_case(era_id, None, {}, "plain"))["resolved_disable_hma"]
    found = []
    for label, fields in standing_alone(era_id).items():
        for flag in (False, None):
            case = _case(era_id, flag, fields, label)
            p = probe(case, resolve(case), resolve)
            if p is None:  # a case the invariants do not judge (the V0 engine)
                continue
            error = p.outcome.error
            refused = error is not None and error.id in HMA_REFUSED
            turned_off = flag is None and error is None and p.outcome.resolved_disable_hma is True and not plain_off
            if (refused or turned_off) and not causes(p):
                found.append(f"{era_id}: {label} (flag {flag}): {error.id if refused else 'HMA off'}, no cause named")
    return found


@pytest.mark.parametrize("era_id", sorted(ERAS_BY_ID))
def test_every_input_that_stands_against_hma_is_a_named_cause(era_id):
    assert uncaused(era_id) == []


def test_every_case_key_is_drawn_alone_or_reviewed_as_no_input_of_its_own():
    drawn = {key for era_id in ERAS_BY_ID for fields in standing_alone(era_id).values() for key in fields}
    assert set(CASE_KEYS) - drawn - NOT_ALONE == set(), "a case key no standing-alone value sets"
    assert NOT_ALONE <= set(CASE_KEYS)


def test_a_cause_left_out_of_causes_is_found():
    """The check can fail: with KV events left out of `_causes`, the releases that refuse an explicit enable for
    them are named."""

    def without_events(p):
        return {name: words for name, words in _causes(p).items() if name != "KV events"}

    resolve = Memo(resolve_case)
    found = [line for era_id in sorted(ERAS_BY_ID) for line in uncaused(era_id, resolve, without_events)]
    assert any("key kv_events (flag False): E-B" in line for line in found), found
