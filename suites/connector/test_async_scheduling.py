"""Issue 31 item 3, async scheduling: C42 in-flight-blocks-kept, C43 loading-blocks-kept.

Both run the engine with async scheduling (`EngineConfig.async_scheduling`; under `--kv-engine vllm` the release's
own AsyncScheduler, driven in the order of vLLM's `EngineCore.step_with_batch_queue`): step N+1 is scheduled and
executed before step N's output is applied, so a request can finish, be aborted or be preempted while a step that
scheduled it is still in flight. The oracles (`suites.connector.inflight.InFlightWatch`) watch the block pool's
allocations and each step's zeroing list; the model's reads are judged against the content oracle as everywhere."""

from __future__ import annotations

import pytest

from reference_impl.engine import content
from suites.connector.context import PREEMPTING_POOL, expect, expect_no_read_errors, prompt, read_marks
from suites.connector.inflight import LOADING, InFlightWatch, status_name

PRESETS = ["fa_only", "fa+swa"]


def _judge(ctx, engine, watch: InFlightWatch, what: str) -> int:
    """The watch saw no violation, the engine drained and read right; returns the blocks allocated while a step
    was in flight (a check whose scenarios allocated none did not exercise async scheduling)."""
    ctx.drain(engine, what)
    expect(watch.evidence("C42") is None, f"{watch.evidence('C42')} — while: {what}")
    expect_no_read_errors(engine, what)
    return watch.allocations_in_flight


@pytest.mark.kv_check("C42")
@pytest.mark.parametrize("preset", PRESETS)
def test_c42_in_flight_blocks_kept(ctx, preset):
    """Three ways a request's blocks are freed while a step that scheduled it may still be in flight, each in a
    pool where the next request waits for exactly those blocks: A stops on a stop token, its first sampled token
    (vLLM's AsyncScheduler has already scheduled A's next decode step on a placeholder token); A is aborted while
    a prefill chunk of it is in flight (its third, and its last); two long requests preempt each other
    mid-prefill. No block a step in flight references may be allocated to anyone before that step's output is
    applied."""
    length = 512
    pool = ctx.pool_for_one(preset, length, async_scheduling=True) + 2  # the next request waits for A's blocks
    engine = ctx.engine(num_blocks=pool, async_scheduling=True)
    watch = InFlightWatch(engine)
    for index in range(2):
        # A stop token the scheduler cannot foresee: the first token the model samples (a length limit it can,
        # and vLLM's AsyncScheduler schedules no step past it).
        tokens = prompt(42_000 + index, length)
        stop = content.next_token(tokens, engine.preset.vocab_size)
        engine.add_request(engine.make_request(tokens, max_tokens=8, stop_token_ids=[stop]))
    in_flight = _judge(ctx, engine, watch, "a request stopped on a stop token while its next step was in flight, "
                                           "its successor waiting")

    for chunks in (3, None):  # aborted after its third prefill chunk, and after its last (A then holds the pool)
        pool = ctx.pool_for_one(preset, length, max_num_batched_tokens=128, async_scheduling=True) + 2
        engine = ctx.engine(num_blocks=pool, max_num_batched_tokens=128, async_scheduling=True)
        watch = InFlightWatch(engine)
        # Prompts of their own: C42 judges the engine, and a hit on what an earlier phase stored is C43's scenario.
        seed = 42_010 if chunks is None else 42_030
        first = engine.add_request(engine.make_request(prompt(seed, length), max_tokens=1))
        engine.add_request(engine.make_request(prompt(seed + 1, length), max_tokens=1))
        for _ in range(40):
            engine.step()
            if first.num_computed_tokens >= (length if chunks is None else 128 * chunks):
                break
        engine.abort_request(first.request_id)
        in_flight += _judge(ctx, engine, watch, f"a request aborted while its {'last' if chunks is None else 'third'} "
                                                "prefill chunk was in flight, its successor waiting")

    engine = ctx.engine(num_blocks=PREEMPTING_POOL.get(preset, 80), max_num_batched_tokens=128,
                        async_scheduling=True)
    watch = InFlightWatch(engine)
    for index in range(2):
        engine.add_request(engine.make_request(prompt(42_020 + index, 700), max_tokens=3))
    in_flight += _judge(ctx, engine, watch, "two long requests preempting each other mid-prefill")
    expect(in_flight > 0, "scenario: no block was allocated while a step was in flight: async scheduling was not "
                          "exercised")


@pytest.mark.kv_check("C43")
@pytest.mark.parametrize("preset", PRESETS)
def test_c43_loading_blocks_kept(ctx, preset):
    """A consumer that loads asynchronously (built-ins: `load_async` with `load_delay_steps` 2, so a load lands
    and is reported in `finished_recving` two steps after it started; a vendor: its declared async-load config)
    reloads three stored prompts beside two decoding requests, in a pool with room for one reload at a time, and
    the first reload is aborted while its load runs. No block a load is writing may be zeroed or allocated anew
    before the scheduler applied the load's end, and every read is right."""
    length = 600
    engine = ctx.engine(num_blocks=3 * ctx.pool_for_one(preset, length, async_scheduling=True),
                        async_scheduling=True, load_async=True, load_delay_steps=2)
    prompts = [prompt(43_000 + index, length) for index in range(3)]
    for tokens in prompts:
        ctx.run(engine, tokens)
    ctx.wipe(engine)
    watch = InFlightWatch(engine)
    since = read_marks(engine)
    # Two fresh requests a step apart: their decode steps keep a step in flight at every schedule, and they leave
    # room for one reload at a time, so the others wait for the blocks of one in load.
    engine.add_request(engine.make_request(prompt(43_100, length), max_tokens=8))
    engine.step()
    engine.add_request(engine.make_request(prompt(43_101, length), max_tokens=8))
    reloads = [engine.add_request(engine.make_request(tokens + [11], max_tokens=2)) for tokens in prompts]
    for _ in range(40):
        engine.step()
        loading = [r for r in reloads if not r.is_finished and status_name(r) == LOADING]
        if loading:
            engine.abort_request(loading[0].request_id)
            break
    engine.run_until_done()
    what = "reloading three stored prompts at once, one aborted while its load ran"
    expect(watch.loads_seen > 0, f"scenario: the connector loaded none of the stored prompts ({what})")
    expect(watch.allocations_in_flight > 0, f"scenario: no block was allocated while a step was in flight ({what})")
    ctx.drain(engine, what)
    expect(watch.evidence("C43") is None, f"{watch.evidence('C43')} — while: {what}")
    expect_no_read_errors(engine, what, since=since)
