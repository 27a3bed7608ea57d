"""Spec 4.2, block reuse races and lifecycle: C24 swa-reuse-race, C25 finish-reuse-race, C26 preemption,
C27 abort-midflight, C28 layer-hooks-attention-only.

What a connector stored is judged by reloading it into wiped memory: the model's reads must match the
content oracle, so bytes of a block's next owner never pass."""

from __future__ import annotations

import pytest

from harness import outcomes
from reference_impl.connector.base import KVConnectorRole
from reference_impl.engine.presets import CORE_PRESETS, WINDOW_PRESETS
from suites.connector.context import PREEMPTING_POOL, expect, expect_no_read_errors, prompt
from suites.connector.oracles import all_blocks, broken_canaries, fence_evidence, fill_canaries, owned_or_cached_blocks

SWA_PRESETS = ["fa+swa", "fa16+swa32", "fa+swa+mamba", *WINDOW_PRESETS]


def _reload_all(ctx, engine, prompts):
    ctx.wipe(engine)
    for tokens in prompts:
        ctx.run(engine, tokens + [11])
    expect_no_read_errors(engine, "reloading what was stored")


@pytest.mark.kv_check("C24", scenario="forced")
@pytest.mark.parametrize("preset", SWA_PRESETS)
def test_c24_swa_reuse_race_forced(ctx, preset):
    """Forced: prefill steps of 512 tokens move the window past whole chunks, in a pool that holds this one
    request and no more, so blocks that leave the window are re-allocated at once; each is overwritten (as
    its next owner would) once vLLM may overwrite it. A store that copies a chunk's window tail after its
    blocks were re-allocated persists the new bytes; the reload must read only A's KV."""
    engine = ctx.engine(num_blocks=ctx.pool_for_one(preset, 1300, max_num_batched_tokens=512),
                        max_num_batched_tokens=512)
    ctx.reuse_freed_blocks(engine)
    tokens = prompt(2400, 1300)
    ctx.run(engine, tokens)
    ctx.expect_reload_correct([tokens[:end] + [1] for end in (300, 560, 1300)],
                              "reloading prefixes of a request whose out-of-window blocks were reused at once",
                              stored_on=engine)


@pytest.mark.kv_check("C24")
@pytest.mark.parametrize("preset", SWA_PRESETS)
def test_c24_swa_reuse_race(ctx, preset):
    """Long chunked prefills free out-of-window blocks that a concurrent request reuses at once."""
    engine = ctx.engine(num_blocks=200, max_num_batched_tokens=128)
    prompts = [prompt(240 + i, 900) for i in range(3)]
    for tokens in prompts:
        engine.add_request(engine.make_request(tokens, max_tokens=3))
    engine.run_until_done()
    _reload_all(ctx, engine, prompts)


@pytest.mark.kv_check("C25", scenario="forced")
@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c25_finish_reuse_race_forced(ctx, preset):
    """Forced: A finishes, B gets every block A freed and writes them in the next step's forward, and only
    then does whatever A's connector left pending run. What was stored for A must be A's bytes."""
    engine, first = ctx.forced_finish_reuse()
    ctx.reuse_freed_blocks(engine)  # and anything freed later is overwritten at once
    ctx.drain(engine, "after the forced reuse")
    ctx.expect_reload_correct([ctx.reload_prompt(first)],
                              "reloading a request whose blocks were reused right after it finished",
                              stored_on=engine)


@pytest.mark.kv_check("C25")
@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c25_finish_reuse_race(ctx, preset):
    """A finished request's blocks go straight to the next request; stores must not see the new bytes."""
    engine = ctx.engine(num_blocks=140)
    prompts = [prompt(250 + i, 700) for i in range(4)]
    for tokens in prompts:
        engine.add_request(engine.make_request(tokens, max_tokens=1))
        engine.step()
    engine.run_until_done()
    _reload_all(ctx, engine, prompts)


@pytest.mark.kv_check("C26")
@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c26_preemption(ctx, preset):
    """Preemption in the middle of a prefill: stores stay correct and no object is stored twice."""
    engine = ctx.engine(num_blocks=PREEMPTING_POOL[preset], max_num_batched_tokens=256)
    prompts = [prompt(260 + i, 700) for i in range(2)]
    requests = [engine.add_request(engine.make_request(t, max_tokens=4)) for t in prompts]
    engine.run_until_done()
    if not any(r.num_preemptions for r in requests):
        # The connector's hits change how many blocks the prefills need; without a preemption there is
        # nothing to judge, which is no evidence against the connector.
        outcomes.inconclusive(f"the preemption scenario did not occur (pool of {PREEMPTING_POOL[preset]} "
                              "blocks, no request was preempted with this connector's hits)")
    expect_no_read_errors(engine, "after preemption")
    ops = [(op.group_id, op.chunk_hash) for c in ctx.calls_of("build_connector_meta", KVConnectorRole.SCHEDULER)
           for op in getattr(c[3], "saves", ())]
    duplicates = {k for k in ops if ops.count(k) > 1}
    expect(not duplicates, f"{len(duplicates)} store keys issued twice, e.g. {sorted(duplicates)[:1]}")
    _reload_all(ctx, engine, prompts)


@pytest.mark.kv_check("C27")
@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c27_abort_midflight(ctx, preset):
    """Aborts while a load is pending and mid-prefill: the finish hook runs and freed blocks stay untouched."""
    engine = ctx.engine(load_async=True, max_num_batched_tokens=256)
    stored = prompt(27, 700)
    ctx.run(engine, stored)
    ctx.forget_local_cache(engine)
    loading = engine.add_request(engine.make_request(stored + [1]))
    prefilling = engine.add_request(engine.make_request(prompt(270, 900)))
    engine.step()
    engine.abort_request(loading.request_id)
    engine.step()
    engine.abort_request(prefilling.request_id)
    hook = "request_finished_all_groups" if ctx.is_hma else "request_finished"
    finished = {c[2][0].request_id for c in ctx.calls_of(hook, KVConnectorRole.SCHEDULER)}
    expect({loading.request_id, prefilling.request_id} <= finished, f"{hook} was not called for aborted requests")
    fenced = all_blocks(engine) - owned_or_cached_blocks(engine)
    fill_canaries(engine, fenced)
    for _ in range(3):
        engine.step()
    broken = broken_canaries(engine, fenced)
    expect(not broken, fence_evidence(broken, "a freed block was written after the abort"))
    ctx.run(engine, stored + [2])
    expect_no_read_errors(engine, "after aborts")


@pytest.mark.kv_check("C28")
@pytest.mark.parametrize("preset", ["fa+mamba_align", "fa+swa+mamba"])
def test_c28_layer_hooks_attention_only(ctx, preset):
    """Layer hooks fire for attention layers only; the connector neither hangs nor misses the Mamba state."""
    engine = ctx.engine()
    reload = ctx.store_then_reload(engine, prompt(28, 800))
    attention = {n for g in engine.kv_cache_config.kv_cache_groups if type(g.kv_cache_spec).__name__ != "MambaSpec"
                 for n in g.layer_names}
    hooked = {c[2][0] for c in ctx.calls if c[1] in ("wait_for_layer_load", "save_kv_layer")}
    expect(hooked <= attention, f"engine bug: layer hooks for non-attention layers {sorted(hooked - attention)}")
    expect(reload.num_external_computed_tokens > 0, "no hit on a hybrid Mamba model after storing", cause="no-hit")
    expect_no_read_errors(engine, "Mamba state after a hit")
