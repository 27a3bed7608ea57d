"""Random cases of an era whose vLLM reads 0.34's dimensions (`suites.config.random_cases`): extra configs,
custom speculative methods and names, module-path children, drawn on top of the older eras' draws."""

from __future__ import annotations

import json

from reference_impl.config.cases import resolve_case
from suites.config.random_cases import random_cases


def test_v034_cases_carry_the_dimensions_0_34_reads():
    text = json.dumps(random_cases("v0.34", 400, 34))
    for fragment, at_least in (('"transfer_mode"', 20), ('"host_pool_gib"', 20), ('"kvconform_drafter"', 20),
                               ('"no_such_method"', 5), ('"suites.config.external_connectors"', 10)):
        assert text.count(fragment) >= at_least, f"only {text.count(fragment)} draws of {fragment} in 400 cases"


def test_older_eras_draw_as_before():
    assert "kv_connector_extra_config" not in json.dumps(random_cases("v0.33", 300, 34))


def test_every_v034_case_follows_the_schema():
    for case in random_cases("v0.34", 400, 35):
        outcome = resolve_case(case)
        assert (outcome["error"] or {}).get("stage") not in ("input", "internal"), (case, outcome)
