"""The connector suite's reading of the check records (`harness.connector_checks`): the report cell a check's
test records, the header line on backdoors, what a check needs on its preset and why it does not apply."""

from __future__ import annotations

from harness.connector_checks import CHECKS
from harness.outcomes import MULTI_GROUP, not_applicable_skip
from harness.targets.connector.profile import KINDS


def check_cell(check_id: str, target_name: str, params: dict, scenario: str | None = None) -> dict[str, str]:
    """The report cell a check's test records: connector, check, tier, preset, the scenario of a check that has
    several test functions (`kv_check("C24", scenario="forced")`), and every other parameter of the test (C30's
    deployment variant, C05's sync/async), so that two variants of one check on one preset are two cells, not one
    cell with two outcomes (`kvconform merge` refuses those, and `kvconform diff` judged only one of them)."""
    check = CHECKS[check_id]
    cell = {"connector": target_name, "check": f"{check_id} {check.name}", "tier": check.tier,
            "preset": str(params.get("preset", "-"))}
    if scenario is not None:
        cell["scenario"] = scenario
    for key, value in sorted(params.items()):
        if key not in ("connector_target", "preset"):
            cell[key] = str(value)
    return cell


def black_box_summary(backdoors: bool) -> str:
    """One header line: which checks decide black-box and what the backdoors add."""
    needs = [c.id for c in CHECKS.values() if c.backdoor and c.backdoor[0] == "needs"]
    sharpened = [c.id for c in CHECKS.values() if c.backdoor and c.backdoor[0] == "sharpens"]
    if not backdoors:
        return (f"connector checks: backdoors off; every check decides from behaviour ({', '.join(needs)} "
                "(SHOULD) skip: they need a backdoor)")
    return (f"connector checks: every MUST check decides from behaviour; backdoors, when the connector has them, "
            f"sharpen {', '.join(sharpened)}; {', '.join(needs)} (SHOULD) needs one")


def needs_of(check_id: str, multi_group: bool, scratch: bool = False, mamba_own_block: bool = False
             ) -> tuple[str, ...]:
    """The capabilities `check_id` needs on its preset (a multi-group one, when `multi_group`; one with a scratch
    group, when `scratch`; one whose Mamba 'align' group has a block of its own beside the attention blocks, when
    `mamba_own_block`): SupportsHMA for every check that runs a model with several KV cache groups, scratch KV
    cache specs for one whose model has a scratch group, a Mamba 'align' block apart from the cache block for
    one with such a group, and its own `needs`."""
    hma = ("hma",) if multi_group or CHECKS[check_id].multi_group else ()
    return hma + (("scratch_groups",) if scratch else ()) + (("mamba_align_block",) if mamba_own_block else ()) \
        + CHECKS[check_id].needs


def not_applicable_reason(check_id: str, profile, multi_group: bool) -> BaseException | None:
    """Why `check_id` does not apply to a connector of `profile` (on a multi-group model when `multi_group`), as
    the typed N/A to raise, or None when it applies."""
    check = CHECKS[check_id]
    reason = check.not_for.get(profile.kind)
    if reason is not None:
        return not_applicable_skip("profile", "does not apply: " + reason.format(kind=f"'{KINDS[profile.kind]}'"),
                                   check=check_id)
    if (multi_group or check.multi_group) and profile.declares_hma and profile.multi_group:
        return not_applicable_skip("profile", profile.multi_group, refuses=MULTI_GROUP)
    return None
