"""Deliberately broken config resolvers: the config matrix must catch each of them.

Each mutant wraps the reference resolver and breaks one rule the spec states, the way a plausible
implementation bug would.
"""

from __future__ import annotations

from reference_impl.config import resolve_case


def ignores_kv_events_in_seed(case: dict) -> dict:
    """Forgets that a kv_events_config disables HMA in the seed (spec §2.2 1b)."""
    if case.get("profile") == "seed" and case.get("kv_events"):
        case = {**case, "kv_events": False}
    return resolve_case(case)


def swaps_warning_order(case: dict) -> dict:
    """Logs the connector warning before the chunked-local warning (spec §8.8: W-C comes first from the seed on)."""
    outcome = resolve_case(case)
    return {**outcome, "warnings": list(reversed(outcome["warnings"]))}
