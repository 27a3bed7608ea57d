"""Spec 4.2, lookup and hit rule: C04 lookup-idempotent, C05 lookup-none-then-value, C06 hit-alignment,
C07 hit-min-over-groups, C08 swa-needs-only-window, C09 mamba-boundary-only."""

from __future__ import annotations

import math

import pytest

from harness import outcomes
from reference_impl.connector.base import KVConnectorRole
from reference_impl.engine.presets import CHUNKED_LOCAL_PRESETS, CORE_PRESETS, MULTI_GROUP_PRESETS, WINDOW_PRESETS
from reference_impl.kv_cache.kv_cache_interface import MambaSpec, SlidingWindowSpec
from suites.connector.context import (
    SMALL_STORE_BYTES,
    expect,
    expect_full_hit,
    expect_no_read_errors,
    expect_store_makes_room,
    prompt,
)
from suites.connector.oracles import oracle_hit_tokens


@pytest.mark.kv_check("C04")
@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c04_lookup_idempotent(ctx, preset):
    """Five lookups of a waiting request agree; aborting it leaves no per-request state or pins."""
    engine = ctx.engine()
    probe = ctx.optional_backdoor(engine.connector, "kvconform_open_state")
    baseline = probe() if probe is not None else {}  # a vendor's store is shared with earlier checks
    tokens = prompt(4, 800)
    ctx.run(engine, tokens)
    ctx.forget_local_cache(engine)
    request = engine.make_request(tokens + [1])
    engine.add_request(request)  # vLLM looks a request up only after add_request (on_new_request)
    answers = [engine.connector.get_num_new_matched_tokens(request, 0) for _ in range(5)]
    expect(len(set(answers)) == 1, f"repeated lookups disagree: {answers}")
    engine.abort_request(request.request_id)
    engine.run_until_done()
    if probe is not None:
        leftovers = {k: v for k, v in probe().items() if v > baseline.get(k, 0)}
        expect(not leftovers, f"state left after a never-admitted request was aborted: {leftovers}")
    if preset in LEAK_PRESETS:
        expect_store_makes_room(ctx, ctx.engine(cpu_bytes=SMALL_STORE_BYTES), "repeated lookups of aborted requests",
                                seed=4000)


LEAK_PRESETS = ("fa_only", "fa+swa")  # where C04 also drives the store past its capacity


LOOKUP_LATENCY_STEPS = 2  # built-ins: the simulated backend answers a lookup two scheduler steps late


@pytest.mark.kv_check("C05")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa+mamba"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_c05_lookup_none_then_value(ctx, preset, mode):
    """With a slow lookup backend: None ("ask again") is followed by a value once the backend answers, the
    stored prefix is still loaded (hit = what was stored), and n == 0 never comes with load_async.

    Built-in connectors run with `lookup_latency_steps`; a vendor connector is checked on whatever it
    answers (its None answers must resolve the same way).
    """
    load_async = mode == "async"
    engine = ctx.engine(lookup_latency_steps=LOOKUP_LATENCY_STEPS, load_async=load_async)
    probe = ctx.optional_backdoor(engine.connector, "kvconform_open_state")
    baseline = probe() if probe is not None else {}  # a vendor's store is shared with earlier checks
    seed = 500 + 10 * load_async + len(preset)  # own prompts per variant: a vendor's store outlives the check
    tokens = prompt(seed, 700)
    ctx.run(engine, tokens)
    ctx.wipe(engine)
    reload = engine.add_request(engine.make_request(tokens + [7, 8, 9], max_tokens=2))
    fresh = engine.add_request(engine.make_request(prompt(seed + 1, 300), max_tokens=2))
    engine.run_until_done()
    answers = ctx.calls_of("get_num_new_matched_tokens", KVConnectorRole.SCHEDULER)
    by_request: dict[str, list] = {}
    for _role, _hook, args, result in answers:
        expect(isinstance(result, tuple) and len(result) == 2, f"lookup returned {result!r}; expected (n, bool)")
        n, is_async = result
        expect(not (n == 0 and is_async), f"lookup for {args[0].request_id} returned (0, True): "
                                          "load_async with no tokens")
        by_request.setdefault(args[0].request_id, []).append(n)
    for request in (reload, fresh):
        seen = by_request.get(request.request_id, [])
        expect(seen, f"the scheduler never asked the connector about {request.request_id}")
        expect(seen[-1] is not None, f"lookups of {request.request_id} answered {seen} and never resolved")
        expect(request.is_finished, f"{request.request_id} did not finish after its lookups {seen}")
    if ctx.target.builtin:
        nones = by_request[reload.request_id].count(None)
        expect(nones >= 1, f"scenario: the slow backend never answered None ({by_request[reload.request_id]})")
    expect_full_hit(ctx, engine, reload, f"after the slow backend answered (lookups {by_request[reload.request_id]}; "
                                         "a not-ready lookup must answer None, not a miss)")
    expect(fresh.num_external_computed_tokens == 0, "a never-stored prompt got an external hit")
    expect_no_read_errors(engine, "after the delayed lookups")
    if probe is not None:
        leftovers = {k: v for k, v in probe().items() if v > baseline.get(k, 0)}
        expect(not leftovers, f"state left after the delayed lookups resolved and the requests finished: {leftovers}")


@pytest.mark.kv_check("C06")
@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c06_hit_alignment(ctx, preset):
    """For many prompt lengths the hit ends on a Mamba state boundary (where the model has Mamba groups), below
    the prompt and the store.

    Attention groups need no alignment: vLLM's scheduler (0.33) takes a hit that ends inside a block as it is
    (only DSV4.1's bounded SWA replay rounds it down, `Scheduler.schedule`), and connectors answer such hits by
    design (LMCache lowers a full-prompt hit by one token; OffloadingConnector serves partial tails at the hash
    block size). A Mamba group restores one state, the one at the hit: a hit between two states has none."""
    engine = ctx.engine()
    sizes = [g.kv_cache_spec.block_size for g in engine.kv_cache_config.kv_cache_groups
             if isinstance(g.kv_cache_spec, MambaSpec)]
    align = math.lcm(*sizes) if sizes else 1
    for length in (255, 256, 257, 511, 513, 700, 768):
        tokens = prompt(600 + length, length)
        ctx.run(engine, tokens)
        ctx.forget_local_cache(engine)
        for lookup_len in (length, length + 40):
            request = engine.make_request(tokens + prompt(1, lookup_len - length))
            engine.add_request(request)
            n, load_async = ctx.ask(engine, request)
            n = n or 0
            expect(n % align == 0, f"prompt {lookup_len}: hit {n} is not on a Mamba state boundary (Mamba block "
                                   f"sizes {sizes}): no state to restore there", cause="hit-not-mamba-aligned")
            # A synchronous hit must leave a token to compute; after an asynchronous load vLLM's scheduler
            # recomputes the last token itself (_update_waiting_for_remote_kv), so a full async hit is legal.
            expect(n <= lookup_len - 1 or (load_async and n == lookup_len),
                   f"prompt {lookup_len}: a synchronous hit of {n} covers the whole prompt")
            expect(n <= length, f"prompt {lookup_len}: hit {n} exceeds the {length} stored tokens")
            engine.abort_request(request.request_id)


def _stored_chunks(engine, ctx, length):
    chunk = ctx.chunk_size(engine)
    if chunk is None:
        outcomes.not_applicable("feature", f"{ctx.cls.__name__} has no kvconform_chunk_size() backdoor")
    return chunk, length // chunk


EVICTION_PATTERNS = {
    # group kind -> chunk indices evicted (after §3.7's four cases, on a 5-chunk prompt)
    "swa-tail-only": {"swa": {0, 1, 2}, "mamba": {0, 1, 2, 3}},
    "swa-last-missing": {"swa": {0, 1, 2, 3, 4}},
    "fa-short": {"full": {3, 4}},
    "swa-hole": {"swa": {0, 3}},
    "mamba-last-missing": {"mamba": {4}},
}


def _expect_servable_hits(ctx, stored_on, tokens, what: str) -> list[int]:
    """On a reader of the store (`CheckContext.reader`: a fresh engine, or `stored_on` where the store is the
    engine's own), look up every 32-token-longer prefix of `tokens`: each hit must end where every group can be
    served from KV the engines ever exposed (`Exposure`). Returns the distinct hit ends."""
    fresh = ctx.reader(stored_on)
    ends = set()
    for n in range(32, len(tokens) + 1, 32):
        hit = ctx.lookup(fresh, tokens[:n])
        if hit:
            why = ctx.exposure.unservable(fresh, tokens, hit)  # the hit's blocks are blocks of `tokens`
            expect(why is None, f"{what}: a {n}-token prompt hit {hit} tokens, but {why}")
            ends.add(hit)
    return sorted(ends)


def _evict_the_middle(engine, tokens, after: int) -> None:
    """Drop from the prefix cache the sliding-window blocks and Mamba states of `tokens` that end past `after`
    and well before the local hit of the next run (a window, at least 256 tokens, before the prompt's last full
    block): vLLM may evict any unreferenced cached block. A connector bound to the KV cache manager may copy a
    cached block (`Exposure`), so without this the middle would be exposed through the prefix cache."""
    pool = engine.manager.block_pool
    request = engine.make_request(list(tokens))
    for gid, group in enumerate(engine.kv_cache_config.kv_cache_groups):
        spec = group.kv_cache_spec
        if not isinstance(spec, (SlidingWindowSpec, MambaSpec)):
            continue
        bs = spec.block_size
        limit = (len(tokens) - 1) // bs * bs - max(getattr(spec, "sliding_window", 0), 256)
        hashes = pool.hashes_at(request, bs)
        doomed = []
        for index in range(len(hashes)):
            if after < (index + 1) * bs <= limit:
                cached = pool.get_cached_block(hashes[index], [gid])
                doomed += [b.block_id for b in cached or () if b.ref_cnt == 0]
        engine.manager.evict_blocks(doomed)


@pytest.mark.kv_check("C07")
@pytest.mark.parametrize("preset", MULTI_GROUP_PRESETS + WINDOW_PRESETS + CHUNKED_LOCAL_PRESETS)
def test_c07_hit_min_over_groups(ctx, preset):
    """Hits are the windowed min over groups, decided black-box: the connector sees a prompt's first 300
    tokens, then not the next 600 (served from the local prefix cache only), then all 1300 with a local hit,
    so sliding-window blocks and Mamba states in the middle were never exposed while full-attention blocks
    were. Every prefix's hit must be servable by every group from what was exposed, and every prefix the
    connector offers must reload byte-exact on a fresh engine. With `kvconform_evict`, the §3.7 eviction
    patterns are checked against the fold oracle as well."""
    engine = ctx.engine()
    tokens = prompt(7, 1300)
    ctx.run(engine, tokens[:300])
    with engine.connector_detached():
        ctx.run(engine, tokens[:900])
    _evict_the_middle(engine, tokens[:900], after=300)
    ctx.run(engine, tokens)
    ends = _expect_servable_hits(ctx, engine, tokens, "after a hole in what the connector saw")
    expect(ends, "scenario: the connector offered no hit for any prefix of a prompt it had seen")
    ctx.expect_reload_correct([tokens[:end] + [1] for end in ends], "reloading every prefix the connector offered",
                              stored_on=engine)
    evict = ctx.optional_backdoor(engine.connector, "kvconform_evict")
    chunk = ctx.chunk_size(engine) if evict is not None else None
    if evict is None or chunk is None:
        return
    specs = [g.kv_cache_spec for g in engine.kv_cache_config.kv_cache_groups]
    kinds = ["mamba" if isinstance(s, MambaSpec) else "swa" if isinstance(s, SlidingWindowSpec) else "full"
             for s in specs]
    for name, pattern in EVICTION_PATTERNS.items():
        tokens = prompt(700 + len(name), 5 * chunk + 20)
        ctx.run(engine, tokens)
        ctx.forget_local_cache(engine)
        request = engine.make_request(tokens)
        present = {}
        for gid, kind in enumerate(kinds):
            stored = set(range(5))
            if kind == "mamba":
                stored = {j for j in stored if ((j + 1) * chunk) % specs[gid].block_size == 0}
            for j in pattern.get(kind, ()):
                evict(request, gid, j)
            present[gid] = stored - set(pattern.get(kind, ()))
        want = oracle_hit_tokens(specs, present, chunk, request.num_tokens)
        engine.add_request(request)  # vLLM looks a request up only after add_request (on_new_request)
        got, _ = ctx.ask(engine, request)
        expect(got == want, f"pattern {name}: hit {got}, oracle {want} (present chunks per group {present})")
        engine.run_until_done()
        expect_no_read_errors(engine, f"pattern {name}")
        if want:
            ctx.expect_reload_correct([tokens[:want] + [1]], f"pattern {name}: reloading the {want}-token hit",
                                      stored_on=engine)


@pytest.mark.kv_check("C08")
@pytest.mark.parametrize("preset", ["fa+swa", "fa16+swa32", "fa+swa+mamba", "fa+swa600"])
def test_c08_swa_needs_only_window(ctx, preset):
    """Evicting sliding-window chunks older than the window keeps the full hit."""
    engine = ctx.engine()
    evict = ctx.backdoor(engine, "kvconform_evict")
    chunk, _ = _stored_chunks(engine, ctx, 0)
    tokens = prompt(8, 4 * chunk + 10)
    ctx.run(engine, tokens)
    ctx.forget_local_cache(engine)
    request = engine.make_request(tokens)
    engine.add_request(request)  # vLLM looks a request up only after add_request (on_new_request)
    before, _ = ctx.ask(engine, request)
    for gid, group in enumerate(engine.kv_cache_config.kv_cache_groups):
        if isinstance(group.kv_cache_spec, SlidingWindowSpec):
            for j in range(0, 4 - math.ceil(group.kv_cache_spec.sliding_window / chunk)):
                evict(request, gid, j)
    after, _ = ctx.ask(engine, request)
    expect(after == before, f"hit fell from {before} to {after} after evicting out-of-window SWA chunks")


@pytest.mark.kv_check("C09")
@pytest.mark.parametrize("preset", ["fa+mamba_align", "fa+swa+mamba"])
def test_c09_mamba_boundary_only(ctx, preset):
    """Stored at Mamba boundaries 256 and 512, a 700-token prompt hits at most 512, with the right state."""
    engine = ctx.engine()
    tokens = prompt(9, 600)
    ctx.run(engine, tokens)
    ctx.forget_local_cache(engine)
    mamba_bs = next(g.kv_cache_spec.block_size for g in engine.kv_cache_config.kv_cache_groups
                    if isinstance(g.kv_cache_spec, MambaSpec))
    longer = tokens + prompt(99, 100)
    reload = ctx.run(engine, longer)
    hit = reload.num_local_computed_tokens + reload.num_external_computed_tokens
    expect(hit <= 512, f"hit {hit} beyond the last stored Mamba boundary 512")
    if hit:
        why = ctx.exposure.unservable(engine, longer, hit)
        expect(why is None, f"hit {hit}, but {why}")
    expect(hit % mamba_bs == 0, f"hit {hit} is not on a Mamba state boundary ({mamba_bs})", cause="hit-not-mamba-aligned")
    expect_no_read_errors(engine, "Mamba state after the hit")
