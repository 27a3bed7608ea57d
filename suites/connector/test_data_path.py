"""Spec 4.2, data path: C14 round-trip-bytes, C15 null-block-untouched, C16 ownership-fence, C17 layer-group
routing, C18 per-group-block-size, C19 skip-local-prefix, C20 loaded-groups-complete."""

from __future__ import annotations

import math

import pytest

from harness import outcomes
from reference_impl.connector.base import KVConnectorRole
from reference_impl.engine.presets import (CHUNKED_LOCAL_PRESETS, CORE_PRESETS, DTYPE_PRESETS, MULTI_GROUP_PRESETS,
                                           WINDOW_PRESETS)
from suites.connector.context import (expect, expect_full_hit, expect_no_read_errors, local_chunk_of, prompt,
                                      scenario)
from reference_impl.kv_cache.kv_cache_interface import cdiv
from suites.connector.oracles import (
    all_blocks,
    broken_canaries,
    canary_rows,
    fence_evidence,
    fill_canaries,
    first_kv_mismatch,
    owned_or_cached_blocks,
    restore_blocks,
    snapshot_blocks,
)


def _expect_hit(request, what: str) -> None:
    expect(request.num_external_computed_tokens > 0,
           f"the connector reported no hit for a prompt it had just stored{scenario(what)}", cause="no-hit")


def _load_in_flight(request) -> bool:
    """Whether `request` waits for an asynchronous load the connector has not yet reported finished (state
    WAITING_FOR_REMOTE_KVS: kvconform's engine says `engine_status`, vLLM's Scheduler `status`). Such a load may
    still be running after `start_load_kv` (vLLM 0.20's SimpleCPUOffloadConnector launches its loads in
    `get_finished`, after the forward); its bytes are due once it is reported, before the request's forward."""
    status = getattr(request, "engine_status", None) or getattr(request, "status", None)
    return getattr(status, "name", None) == "WAITING_FOR_REMOTE_KVS"


def _oracle_after_load(engine, checked: list, what: str):
    """An after-`start_load_kv` hook: each loading request's loaded range equals the content oracle (a sync load
    in the step it is scheduled, an asynchronous one after `start_load_kv` of the step that first schedules the
    request, once its load was reported finished)."""

    def after_load(role, result, *args):
        for request in engine.scheduler.requests.values():
            if request.num_external_computed_tokens and request.request_id not in checked \
                    and not _load_in_flight(request) \
                    and engine.manager.coordinator.has_request(request.request_id):
                checked.append(request.request_id)
                end = request.num_local_computed_tokens + request.num_external_computed_tokens
                mismatch = first_kv_mismatch(engine, request.all_token_ids,
                                             engine.manager.get_block_ids(request.request_id),
                                             request.num_local_computed_tokens, end)
                expect(mismatch is None, f"a loaded block differs from the content oracle{scenario(what)}: {mismatch}")

    return after_load


@pytest.mark.kv_check("C14")
@pytest.mark.parametrize("preset", CORE_PRESETS + DTYPE_PRESETS + WINDOW_PRESETS + CHUNKED_LOCAL_PRESETS)
def test_c14_round_trip_bytes(ctx, preset):
    """Store, wipe the KV memory, reload: every block the model needs equals the content oracle."""
    engine = ctx.engine()
    tokens = prompt(14, 900)
    checked = []
    ctx.around["start_load_kv"] = (None, _oracle_after_load(engine, checked, "after start_load_kv"))
    reload = ctx.store_then_reload(engine, tokens)
    _expect_hit(reload, "round trip")
    expect_no_read_errors(engine, "after reload")


@pytest.mark.kv_check("C15")
@pytest.mark.parametrize("preset", CORE_PRESETS + WINDOW_PRESETS + CHUNKED_LOCAL_PRESETS)
def test_c15_null_block_untouched(ctx, preset):
    """Block 0 keeps its canary through stores and loads, and its bytes never come back as data.

    The prompt is prefilled in small steps, so sliding-window blocks leave the window (become null) while
    the request runs. Then every prefix the connector offers is reloaded on a fresh engine: no loaded block
    may hold the null block's bytes, and every read must match the content oracle."""
    engine = ctx.engine(max_num_batched_tokens=128)
    tokens = prompt(15, 900)
    fill_canaries(engine, [])
    ctx.run(engine, tokens)
    expect(not broken_canaries(engine, []), f"null block written during store: {broken_canaries(engine, [])[:1]}",
           cause="null-block-written")
    fresh = ctx.reader(engine)
    ends = sorted({ctx.lookup(fresh, tokens[:n]) for n in range(40, len(tokens) + 1, 40)} - {0})
    if not ends:
        # A miss loads nothing, so the load half of this check has nothing to judge; missing is C14's concern.
        outcomes.inconclusive("the store kept block 0 intact, but the connector reported no hit for any prefix "
                              "of the prompt it had just stored, so no load could be checked for the null block")
    nulls: list[str] = []

    def after_load(role, result, *args):
        for req_id in fresh.scheduler.pending_cache:  # the sync loads of this step
            request = fresh.scheduler.requests[req_id]
            if fresh.manager.coordinator.has_request(req_id):
                end = request.num_local_computed_tokens + request.num_external_computed_tokens
                nulls.extend(canary_rows(fresh, fresh.manager.get_block_ids(request.request_id),
                                         request.num_local_computed_tokens, end))

    ctx.around["start_load_kv"] = (None, after_load)
    for end in ends:
        ctx.wipe(fresh)
        fill_canaries(fresh, [])
        ctx.run(fresh, tokens[:end] + [1, 2])
        expect(not nulls, f"a stored object holds the null block's bytes: loading the {end}-token prefix put "
                          f"them into {nulls[:2]} (a null or out-of-window block was stored as data)")
        expect(not broken_canaries(fresh, []), f"null block written during the load of the {end}-token prefix: "
                                               f"{broken_canaries(fresh, [])[:1]}")
        expect_no_read_errors(fresh, f"after reloading the {end}-token prefix")


def _fence(ctx, engine):
    """Before each step: canaries in every block no request owns and no cache keeps; after: all intact."""
    fenced: list[set[int]] = []

    def before(so):
        blocks = all_blocks(engine) - owned_or_cached_blocks(engine)
        fill_canaries(engine, blocks)
        fenced.append(blocks)

    def after(so, kv_output):
        blocks = fenced.pop()
        broken = broken_canaries(engine, blocks)
        expect(not broken, fence_evidence(broken, f"step {engine.step_count}: a block the request does not own was written"))

    return {"before_execute": before, "after_execute": after}


def _own_blocks_fence(ctx, engine):
    """Around each start_load_kv: the loading request's blocks beyond its hit (in every group) carry canaries
    and must keep them; blocks inside the hit must hold their own group's oracle bytes afterwards. A load
    through another group's layer lands on a block the request owns in that other group."""
    fenced: dict = {}

    def before(role, *args):
        if role != KVConnectorRole.WORKER:
            return
        blocks = set()
        for req_id in engine.scheduler.pending_cache:  # the sync loads of this step
            request = engine.scheduler.requests[req_id]
            if engine.manager.coordinator.has_request(req_id):
                end = request.num_local_computed_tokens + request.num_external_computed_tokens
                table = engine.manager.get_block_ids(request.request_id)
                for gid, group in enumerate(engine.kv_cache_config.kv_cache_groups):
                    bs = group.kv_cache_spec.block_size
                    blocks.update(b for b in table[gid][cdiv(end, bs):] if b)
                fenced.setdefault("loads", []).append((request, table, end))
        blocks -= {b for _, table, end in fenced.get("loads", ()) for gid, ids in enumerate(table)
                   for b in ids[: end // engine.kv_cache_config.kv_cache_groups[gid].kv_cache_spec.block_size]}
        fill_canaries(engine, blocks)
        fenced["blocks"] = blocks

    def after(role, result, *args):
        blocks = fenced.pop("blocks", None)
        loads = fenced.pop("loads", [])
        if blocks is None:
            return
        broken = broken_canaries(engine, blocks)
        expect(not broken, fence_evidence(broken, "the load wrote a block the request owns beyond its hit (another "
                                                  "group's block, or one the forward has yet to write)"))
        for request, table, end in loads:
            mismatch = first_kv_mismatch(engine, request.all_token_ids, table, request.num_local_computed_tokens, end)
            expect(mismatch is None, f"after the load, {mismatch} (a write through another group's layer?)")

    return before, after


@pytest.mark.kv_check("C16")
@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c16_ownership_fence(ctx, preset):
    """With two concurrent requests, loads write only blocks of the loading request, and within it only the
    blocks of the right group inside the hit."""
    engine = ctx.engine()
    first, second = prompt(160, 800), prompt(161, 700)
    ctx.run(engine, first)
    ctx.run(engine, second)
    ctx.forget_local_cache(engine)
    hooks = _fence(ctx, engine)
    if ctx.judges_content:
        # A dummy-KV connector stands in for the prefill, which writes all of the request's own blocks in every
        # group: only blocks the request does not own are fenced for it.
        ctx.around["start_load_kv"] = _own_blocks_fence(ctx, engine)
    a = engine.add_request(engine.make_request(first + [5], max_tokens=3))
    engine.add_request(engine.make_request(second + [6], max_tokens=3))
    engine.run_until_done(**hooks)
    _expect_hit(a, "ownership fence")
    expect_no_read_errors(engine, "two concurrent loads")


@pytest.mark.kv_check("C17")
@pytest.mark.parametrize("preset", MULTI_GROUP_PRESETS)
def test_c17_layer_group_routing(ctx, preset):
    """Groups use disjoint block ids; each layer's KV must come back through its own group's ids."""
    engine = ctx.engine()
    reload = ctx.store_then_reload(engine, prompt(17, 1000), wipe=True)
    _expect_hit(reload, "routing")
    table = engine.manager.get_block_ids(reload.request_id) if engine.manager.coordinator.has_request(
        reload.request_id) else None
    expect_no_read_errors(engine, "layer->group routing")
    if table is not None:
        end = reload.num_local_computed_tokens + reload.num_external_computed_tokens
        mismatch = first_kv_mismatch(engine, reload.all_token_ids, table, 0, end)
        expect(mismatch is None, str(mismatch))


@pytest.mark.kv_check("C18")
@pytest.mark.parametrize("preset", ["fa16+swa32", "fa+mamba_align"])
def test_c18_per_group_block_size(ctx, preset):
    """Mixed block sizes (16/32, 16/256): loads and stores slice each group with its own block size."""
    engine = ctx.engine()
    sizes = [g.kv_cache_spec.block_size for g in engine.kv_cache_config.kv_cache_groups]
    for length in (520, 777):
        reload = ctx.store_then_reload(engine, prompt(length, length))
        _expect_hit(reload, f"prompt of {length}")
        end = reload.num_local_computed_tokens + reload.num_external_computed_tokens
        expect(end % math.lcm(*sizes) == 0, f"hit end {end} is not a multiple of every group block size {sizes}")
    expect_no_read_errors(engine, "mixed block sizes")


KERNEL_BLOCK_RATIO = 2  # the attention backend splits each manager block in two kernel blocks


@pytest.mark.kv_check("C18", scenario="kernel-block-ratio")
@pytest.mark.parametrize("preset", ["fa16+swa32", "fa+swa+mamba"])
def test_c18_kernel_block_ratio(ctx, preset):
    """Registered attention tensors hold kernel blocks (B = num_blocks x 2, each half a manager block):
    manager block b is kernel blocks 2b and 2b+1. Stores and loads must map through the ratio: the loaded
    bytes equal the oracle and no block outside the request's table is written (Mamba states are not split).
    """
    engine = ctx.engine(num_blocks=400, kernel_block_ratio=KERNEL_BLOCK_RATIO)
    registered = [c[2][0] for c in ctx.calls_of("register_kv_caches", KVConnectorRole.WORKER)]
    expect(registered, "scenario: the worker never registered its KV caches")
    rows = {name: (t[0] if isinstance(t, list) else t).shape[0] for name, t in registered[0].items()
            if not isinstance(t, list)}
    expect(set(rows.values()) == {400 * KERNEL_BLOCK_RATIO},
           f"scenario: registered attention tensors should have 800 kernel blocks, got {sorted(set(rows.values()))}")
    tokens = prompt(18, 900)
    ctx.run(engine, tokens)
    ctx.wipe(engine)
    checked = []
    ctx.around["start_load_kv"] = (None, _oracle_after_load(engine, checked,
                                                            f"kernel-block ratio {KERNEL_BLOCK_RATIO}, after start_load_kv"))
    reload = engine.add_request(engine.make_request(tokens + [1, 2, 3], max_tokens=2))
    engine.run_until_done(**_fence(ctx, engine))
    expect_full_hit(ctx, engine, reload, f"kernel-block ratio {KERNEL_BLOCK_RATIO}")
    expect(checked, "scenario: no load was observed")
    expect_no_read_errors(engine, f"kernel-block ratio {KERNEL_BLOCK_RATIO}")


@pytest.mark.kv_check("C19")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa", "fa16+swa32", *CHUNKED_LOCAL_PRESETS])
def test_c19_skip_local_prefix(ctx, preset):
    """With a local prefix hit, the connector loads only beyond it and never writes the local blocks."""
    engine = ctx.engine()
    tokens = prompt(19, 1100)
    ctx.run(engine, tokens)
    ctx.forget_local_cache(engine)
    # A local prefix-cache entry of the first ~288 tokens; on a chunked-local model, of a whole attention chunk
    # (a connector may decline an external suffix that starts inside one: suites.connector.test_inputs).
    chunk = local_chunk_of(preset)
    ctx.run(engine, tokens[:300] if chunk == 1 else tokens[:chunk + 10])
    local_blocks: dict = {}

    def before(role, *args):
        if role != KVConnectorRole.WORKER:
            return
        for request in engine.scheduler.requests.values():
            if request.num_external_computed_tokens and request.num_local_computed_tokens \
                    and engine.manager.coordinator.has_request(request.request_id):
                table = engine.manager.get_block_ids(request.request_id)
                blocks = set()
                for gid, group in enumerate(engine.kv_cache_config.kv_cache_groups):
                    bs = group.kv_cache_spec.block_size
                    blocks.update(b for b in table[gid][: request.num_local_computed_tokens // bs] if b)
                local_blocks["saved"] = snapshot_blocks(engine, blocks)
                local_blocks["blocks"] = blocks
                fill_canaries(engine, blocks)

    def after(role, result, *args):
        blocks = local_blocks.pop("blocks", None)
        if blocks is None:
            return
        broken = broken_canaries(engine, blocks)
        restore_blocks(engine, local_blocks.pop("saved"))
        expect(not broken, fence_evidence(broken, "the load wrote a block of the local prefix hit"),
               cause="local-hit-overwritten")

    ctx.around["start_load_kv"] = (before, after)
    reload = ctx.run(engine, tokens + [3])
    expect(reload.num_local_computed_tokens > 0, "scenario: no local prefix hit was set up")
    _expect_hit(reload, "local prefix + external hit")
    expect_no_read_errors(engine, "after a partial local hit")


@pytest.mark.kv_check("C20")
@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c20_loaded_groups_complete(ctx, preset):
    """Stale bytes in freshly allocated blocks: after the load is reported, none remain in loaded groups."""
    engine = ctx.engine(load_async=True)
    tokens = prompt(20, 800)
    ctx.run(engine, tokens)
    ctx.forget_local_cache(engine)
    stale = {}

    def after(so, kv_output):
        for req_id in kv_output.finished_recving - kv_output.failed_recving:
            request = engine.scheduler.requests[req_id]
            groups = [c[3] for c in ctx.calls_of("get_loaded_kv_cache_group_ids", KVConnectorRole.SCHEDULER)
                      if c[2][0].request_id == req_id]
            loaded = set(groups[-1]) if groups else set(range(len(engine.kv_cache_config.kv_cache_groups)))
            end = request.num_local_computed_tokens + request.num_external_computed_tokens
            mismatch = first_kv_mismatch(engine, request.all_token_ids, engine.manager.get_block_ids(req_id),
                                         request.num_local_computed_tokens, end, loaded)
            if mismatch is not None and stale.get("mismatch") is None:  # the first stale byte is the evidence
                stale["mismatch"] = mismatch

    def sync_after(role, result, *args):
        for request in engine.scheduler.requests.values():
            if request.num_external_computed_tokens and engine.manager.coordinator.has_request(request.request_id) \
                    and "mismatch" not in stale and not request.is_finished and not _load_in_flight(request):
                end = request.num_local_computed_tokens + request.num_external_computed_tokens
                stale["mismatch"] = first_kv_mismatch(engine, request.all_token_ids,
                                                      engine.manager.get_block_ids(request.request_id),
                                                      request.num_local_computed_tokens, end)

    fill_canaries(engine, all_blocks(engine))
    ctx.around["start_load_kv"] = (None, sync_after)
    reload = engine.add_request(engine.make_request(tokens + [4], max_tokens=2))
    engine.run_until_done(after_execute=after)  # judges an async load the step it is reported finished
    _expect_hit(reload, "stale-block scenario")
    expect(stale.get("mismatch") is None, f"stale bytes left in a loaded group: {stale.get('mismatch')}")
    expect_no_read_errors(engine, "after the load")
