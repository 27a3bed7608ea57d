"""The check catalogue as data: id -> (tier, short name, one-line description) (connector spec section 4.2)."""

from __future__ import annotations

from harness.targets.connector_profile import KINDS, MULTI_GROUP_REFUSAL

CHECKS: dict[str, tuple[str, str, str]] = {
    "C01": ("MUST", "declares-hma", "SupportsHMA, request_finished_all_groups overridden, (vllm_config, role, kv_cache_config) constructor"),
    "C02": ("MUST", "scheduler-role-cpu", "the scheduler-role instance runs every scheduler hook with no GPU and no worker state"),
    "C03": ("MUST", "group-discovery", "skips non-transferable groups and rejects unsupported specs at start with a clear error"),
    "C04": ("MUST", "lookup-idempotent", "repeated lookups agree; a never-admitted request leaks nothing"),
    "C05": ("MUST", "lookup-none-then-value", "a None lookup is followed by a value; load_async is False when n == 0"),
    "C06": ("MUST", "hit-alignment", "hits stay below the prompt length and within what was stored, and land on a Mamba state boundary where the model has Mamba groups (an attention hit may end inside a block: vLLM 0.33's scheduler takes it)"),
    "C07": ("MUST", "hit-min-over-groups", "the hit is the largest length every group can serve (windowed rule)"),
    "C08": ("SHOULD", "swa-needs-only-window", "losing sliding-window chunks older than the window does not reduce the hit"),
    "C09": ("MUST", "mamba-boundary-only", "hits only at stored Mamba boundaries, with the state of that boundary"),
    "C10": ("MUST", "alloc-input-dedupe", "update_state_after_alloc with the full table (twice) leaves no duplicate blocks"),
    "C11": ("MUST", "table-tracking", "per-group tables follow new (full), running (append) and resumed (replace) requests"),
    "C12": ("MUST", "meta-pure", "build_connector_meta does not mutate the SchedulerOutput and its result pickles"),
    "C13": ("MUST", "finish-hook-shapes", "request_finished_all_groups takes real HMA shapes, returns (bool, JSON dict|None), once per request"),
    "C14": ("MUST", "round-trip-bytes", "store, wipe, reload: every needed block equals the content oracle"),
    "C15": ("MUST", "null-block-untouched", "block 0 is never written by loads nor persisted by stores"),
    "C16": ("MUST", "ownership-fence", "loads write only blocks the request owns; other blocks keep their canaries"),
    "C17": ("MUST", "layer-group-routing", "each layer's KV moves through block_ids[group(layer)]"),
    "C18": ("MUST", "per-group-block-size", "correct slicing when groups have different block sizes"),
    "C19": ("MUST", "skip-local-prefix", "a load never writes the blocks of the local prefix-cache hit"),
    "C20": ("MUST", "loaded-groups-complete", "every non-null block of each loaded group is written before the load is reported"),
    "C21": ("MUST", "async-completion-liveness", "every load and delayed free is reported by every worker; the engine drains"),
    "C22": ("MUST", "failure-by-request", "a failed load on a multi-group model is reported per request, never per block"),
    "C23": ("MUST", "failure-no-partial-poison", "after a failed load nothing invalid is offered again"),
    "C24": ("MUST", "swa-reuse-race", "a store never persists bytes of a sliding-window block after its reuse"),
    "C25": ("MUST", "finish-reuse-race", "a store never persists bytes of a finished request's block after its reuse"),
    "C26": ("MUST", "preemption", "preemption mid-prefill: no stale stores, replaced tables, no duplicate store keys"),
    "C27": ("MUST", "abort-midflight", "abort during a load or a prefill: finish hook called, no later writes to freed blocks"),
    "C28": ("MUST", "layer-hooks-attention-only", "with layer hooks for attention layers only, no hang and Mamba state restored"),
    "C29": ("MUST", "empty-steps", "idle steps run the whole connector cycle safely and keep making progress"),
    "C30": ("MUST", "key-isolation", "cache salt, LoRA and group give no cross hit; group objects do not alias"),
    "C31": ("MUST", "state-hygiene", "after many requests (finish, abort, preempt) no per-request state or pin remains"),
    "C32": ("SHOULD", "events-group-aware", "KV events, if any, carry group information"),
    "C33": ("MUST", "multiconnector", "inside MultiConnector with another HMA child, both get request_finished_all_groups"),
    "C34": ("MUST", "tp-rank-shards", "with TP=2 each rank stores and loads only its own shard"),
    "C35": ("SHOULD", "capacity-pressure", "a full backend degrades without wrong hits"),
    "C36": ("MUST", "determinism-across-processes", "store keys are identical across processes with different PYTHONHASHSEED"),
    # Issue 31 item 3: the inputs real connector bugs live in (suites/connector/test_inputs.py).
    "C37": ("MUST", "multiconnector-stores-every-child", "a cold request through MultiConnector reaches every child's store: each child, looked up on its own, hits what it hits alone"),
    "C38": ("MUST", "lookup-at-local-hits", "asked at a local hit (0, a chunk boundary, inside a chunk), the connector offers the rest of what it stored, and the load reads right"),
    "C39": ("MUST", "exact-multiple-reload", "a prompt whose length is an exact multiple of the block size stores as much as one token longer: a reload hits all of it"),
    "C40": ("MUST", "offloaded-block-multiple", "with its stored block 4x and 16x the GPU block, a reload hits every whole stored block and never the partial one, and reads right"),
    "C41": ("MUST", "eagle-drops-last-block", "under EAGLE / MTP speculative decoding a hit leaves its last block to recompute, and the load writes nothing past the hit"),
}

# Which optional backdoor each check uses, and how: every MUST check decides from observable behaviour; a
# backdoor only adds evidence ("sharpens"). A check whose verdict needs one is a SHOULD ("needs").
BACKDOORS: dict[str, tuple[str, str]] = {
    "C04": ("sharpens", "kvconform_open_state"),
    "C05": ("sharpens", "kvconform_open_state"),
    "C07": ("sharpens", "kvconform_evict, kvconform_chunk_size"),
    "C08": ("needs", "kvconform_evict, kvconform_chunk_size"),
    "C10": ("sharpens", "kvconform_tracked_block_ids"),
    "C11": ("sharpens", "kvconform_tracked_block_ids"),
    "C30": ("sharpens", "kvconform_evict"),
    "C31": ("sharpens", "kvconform_open_state"),
    "C36": ("sharpens", "kvconform_object_keys (only when the store does not outlive its process)"),
}


def check_cell(check_id: str, target_name: str, params: dict, scenario: str | None = None) -> dict[str, str]:
    """The report cell a check's test records: connector, check, tier, preset, the scenario of a check that has
    several test functions (`kv_check("C24", scenario="forced")`), and every other parameter of the test (C30's
    deployment variant, C05's sync/async), so that two variants of one check on one preset are two cells, not one
    cell with two outcomes (`kvconform merge` refuses those, and `kvconform diff` judged only one of them)."""
    tier, name, _ = CHECKS[check_id]
    cell = {"connector": target_name, "check": f"{check_id} {name}", "tier": tier,
            "preset": str(params.get("preset", "-"))}
    if scenario is not None:
        cell["scenario"] = scenario
    for key, value in sorted(params.items()):
        if key not in ("connector_target", "preset"):
            cell[key] = str(value)
    return cell


def black_box_summary(backdoors: bool) -> str:
    """One header line: which checks decide black-box and what the backdoors add."""
    needs = sorted(c for c, (how, _) in BACKDOORS.items() if how == "needs")
    sharpened = sorted(c for c, (how, _) in BACKDOORS.items() if how == "sharpens")
    if not backdoors:
        return (f"connector checks: backdoors off; every check decides from behaviour ({', '.join(needs)} "
                "(SHOULD) skip: they need a backdoor)")
    return (f"connector checks: every MUST check decides from behaviour; backdoors, when the connector has them, "
            f"sharpen {', '.join(sharpened)}; {', '.join(needs)} (SHOULD) needs one")


# Which checks apply to which kind of connector (harness.targets.connector_profile): reviewed data. A check
# listed for a kind is reported as "N/A: <reason>" for connectors of that kind, never as a failure. Checks not
# listed apply; where such a check also compares KV bytes with what was stored, that comparison is made only
# for connectors that store KV (`CheckContext.judges_content`).
_HIT_VS_STORE = "it judges hits against what was stored, and a {kind} connector claims hits for prompts it never stored"
_BYTES_VS_STORE = "it judges loaded KV bytes against what was stored, and a {kind} connector loads no stored KV"
_FOR_DUMMY_AND_TRANSFER = {
    "C05": _HIT_VS_STORE, "C06": _HIT_VS_STORE, "C07": _HIT_VS_STORE, "C08": _HIT_VS_STORE,
    "C09": _HIT_VS_STORE, "C30": _HIT_VS_STORE, "C36": _HIT_VS_STORE, "C35": _HIT_VS_STORE,
    "C37": _HIT_VS_STORE, "C38": _HIT_VS_STORE, "C39": _HIT_VS_STORE, "C40": _HIT_VS_STORE,
    "C41": _HIT_VS_STORE,
    "C10": _BYTES_VS_STORE, "C11": _BYTES_VS_STORE, "C14": _BYTES_VS_STORE, "C17": _BYTES_VS_STORE,
    "C18": _BYTES_VS_STORE, "C20": _BYTES_VS_STORE, "C24": _BYTES_VS_STORE, "C25": _BYTES_VS_STORE,
    "C26": _BYTES_VS_STORE, "C28": _BYTES_VS_STORE, "C34": _BYTES_VS_STORE,
    "C22": "it injects a load failure by hiding stored objects from the workers, and a {kind} connector reads none",
    "C23": "it injects a load failure by hiding stored objects from the workers, and a {kind} connector reads none",
}
_NEEDS_LOCAL_HIT = "it needs a hit served within one engine, and a {kind} connector only serves hits a peer instance sends"
NOT_FOR_KIND: dict[str, dict[str, str]] = {
    "stores": {},
    "dummy": _FOR_DUMMY_AND_TRANSFER,
    "transfer": {**_FOR_DUMMY_AND_TRANSFER, "C15": _NEEDS_LOCAL_HIT, "C16": _NEEDS_LOCAL_HIT,
                 "C19": _NEEDS_LOCAL_HIT, "C21": _NEEDS_LOCAL_HIT, "C27": _NEEDS_LOCAL_HIT},
}
# Checks whose time limit is this many times --kv-connector-timeout: C36 starts fresh interpreters, each of which
# imports the connector's package (vLLM's import alone takes tens of seconds on a loaded machine); a hanging hook
# is still caught, later.
TIME_LIMIT_FACTOR = {"C36": 10}
# Checks that run a multi-group model whatever their preset parameter says.
MULTI_GROUP_CHECKS = ("C01", "C33")


# Which capabilities of the connector API (harness.targets.connector_capabilities.CAPABILITIES) each check needs:
# reviewed data. On a release that lacks one the check is "N/A on X.Y.Z: <what the release lacks>", never a
# failure. Only an API without which the check's property cannot be observed is listed: C22 reads per-request
# failure reports (failed_recving), C32 the events the connector hands the scheduler. A check that needs one for
# a part of it asks inline (`CheckContext.require`: C03's rejects half reads the connector's own answer of which
# groups it loads, which without the hook is the scheduler's assumption, not the connector's). A property a
# release can hold without the newer hook stays a check there (C24-C26's reuse races without
# handle_preemptions: a store of a reused block is still stale).
NEEDS: dict[str, tuple[str, ...]] = {
    "C22": ("failed_recving",),
    "C32": ("take_events",),
}


def needs_of(check_id: str, multi_group: bool, scratch: bool = False, mamba_own_block: bool = False
             ) -> tuple[str, ...]:
    """The capabilities `check_id` needs on its preset (a multi-group one, when `multi_group`; one with a scratch
    group, when `scratch`; one whose Mamba 'align' group has a block of its own beside the attention blocks, when
    `mamba_own_block`): SupportsHMA for every check that runs a model with several KV cache groups, scratch KV
    cache specs for one whose model has a scratch group, a Mamba 'align' block apart from the cache block for
    one with such a group, and its `NEEDS`."""
    hma = ("hma",) if multi_group or check_id in MULTI_GROUP_CHECKS else ()
    return hma + (("scratch_groups",) if scratch else ()) + (("mamba_align_block",) if mamba_own_block else ()) \
        + NEEDS.get(check_id, ())


def not_applicable_reason(check_id: str, profile, multi_group: bool) -> str | None:
    """Why `check_id` does not apply to a connector of `profile` (on a multi-group model when `multi_group`), or
    None when it applies."""
    reason = NOT_FOR_KIND.get(profile.kind, {}).get(check_id)
    if reason is not None:
        return f"{check_id} does not apply: " + reason.format(kind=f"'{KINDS[profile.kind]}'")
    if (multi_group or check_id in MULTI_GROUP_CHECKS) and profile.declares_hma and profile.multi_group:
        return MULTI_GROUP_REFUSAL + profile.multi_group
    return None
