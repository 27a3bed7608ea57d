"""Spec 4.2, completion and failures: C21 async-completion-liveness, C22 failure-by-request,
C23 failure-no-partial-poison, C29 empty-steps."""

from __future__ import annotations

import pytest

from reference_impl.connector.base import KVConnectorRole
from reference_impl.engine.presets import PRESETS
from suites.connector.context import expect, expect_no_read_errors, prompt

ALL_PRESETS = list(PRESETS)
MULTI_PRESETS = [p for p in PRESETS if len(PRESETS[p].groups) > 1]


def _scheduler_drained(engine) -> list[str]:
    s = engine.scheduler
    left = []
    if s.waiting or s.running:
        left.append(f"{len(s.waiting)} waiting / {len(s.running)} running requests")
    if s.delayed_free:
        left.append(f"delayed frees never reported as finished_sending: {sorted(s.delayed_free)}")
    if engine.aggregator.pending:
        left.append(f"ids reported by only some workers: {engine.aggregator.pending}")
    return left


@pytest.mark.kv_check("C21")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa"])
def test_c21_async_completion_liveness(ctx, preset):
    """With TP=2 and async loads, every id completes on every worker within a few idle steps."""
    engine = ctx.engine(tp=2, load_async=True)
    tokens = [prompt(21 + i, 600) for i in range(3)]
    for t in tokens:
        ctx.run(engine, t)
    ctx.forget_local_cache(engine)
    for t in tokens:
        engine.add_request(engine.make_request(t + [1], max_tokens=2))
    engine.run_until_done(max_steps=200, idle_steps=5)
    left = _scheduler_drained(engine)
    expect(not left, f"engine not drained after 5 idle steps: {left}")
    given: set[str] = set()
    for role, hook, args, result in ctx.calls:
        if role == KVConnectorRole.WORKER and hook == "get_transfer_results":
            given |= set(args[0])
            extra = set(result.finished_sending or ()) - given
            expect(not extra, f"finished_sending {sorted(extra)} was never passed in finished_req_ids")
    expect_no_read_errors(engine, "TP=2 async loads")


def _evict_between_lookup_and_load(ctx, engine, evict):
    """Evict the first stored object of every request that has a pending external load."""
    def before(so):
        for request in engine.scheduler.requests.values():
            if request.num_external_computed_tokens and not getattr(request, "_kvconform_evicted", False):
                request._kvconform_evicted = True
                evict(request, 1, 0)
                evict(request, 0, 0)
    return before


@pytest.mark.kv_check("C22")
@pytest.mark.parametrize("preset", MULTI_PRESETS)
def test_c22_failure_by_request(ctx, preset):
    """A backend read failure on a multi-group model is reported in failed_recving (and finished_recving),
    never as block ids; the request recovers by recomputing."""
    engine = ctx.engine()
    evict = ctx.backdoor(engine, "kvconform_evict")
    tokens = prompt(22, 800)
    ctx.run(engine, tokens)
    ctx.forget_local_cache(engine)
    outputs = []
    request = engine.add_request(engine.make_request(tokens + [5], max_tokens=2))
    engine.run_until_done(before_execute=_evict_between_lookup_and_load(ctx, engine, evict),
                          after_execute=lambda so, out: outputs.append(out))
    failed = set().union(*(o.failed_recving for o in outputs))
    finished = set().union(*(o.finished_recving for o in outputs))
    invalid = set().union(*(o.invalid_block_ids for o in outputs))
    expect(not invalid, f"load errors reported as block ids {sorted(invalid)[:8]} on a multi-group model")
    expect(request.request_id in failed, "the failed load was not reported in failed_recving")
    expect(failed <= finished, f"failed_recving {sorted(failed - finished)} not also in finished_recving")
    expect_no_read_errors(engine, "recovery after a failed load")


@pytest.mark.kv_check("C23")
@pytest.mark.parametrize("preset", MULTI_PRESETS)
def test_c23_failure_no_partial_poison(ctx, preset):
    """After a failed load, the same prompt again only gets hits whose bytes are right."""
    engine = ctx.engine()
    evict = ctx.backdoor(engine, "kvconform_evict")
    tokens = prompt(23, 800)
    ctx.run(engine, tokens)
    ctx.forget_local_cache(engine)
    engine.add_request(engine.make_request(tokens + [5], max_tokens=2))
    engine.run_until_done(before_execute=_evict_between_lookup_and_load(ctx, engine, evict))
    ctx.wipe(engine)
    ctx.run(engine, tokens + [6])
    expect_no_read_errors(engine, "lookup after a failed load")


@pytest.mark.kv_check("C29")
@pytest.mark.parametrize("preset", ALL_PRESETS)
def test_c29_empty_steps(ctx, preset):
    """Idle steps (nothing scheduled) run bind/load/save/results/clear safely and the engine drains."""
    engine = ctx.engine(load_async=True)
    for _ in range(3):
        engine.step()
    tokens = prompt(29, 600)
    ctx.run(engine, tokens)
    ctx.forget_local_cache(engine)
    engine.add_request(engine.make_request(tokens + [1]))
    engine.run_until_done(idle_steps=4)
    idle_saves = [c for c in ctx.calls_of("wait_for_save", KVConnectorRole.WORKER)]
    expect(len(idle_saves) >= engine.step_count, "wait_for_save was not called on every step")
    expect(not _scheduler_drained(engine), f"not drained: {_scheduler_drained(engine)}")
    expect_no_read_errors(engine, "with idle steps")
