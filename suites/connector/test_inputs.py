"""The inputs real connector bugs live in (issue 31 item 3): C37 multiconnector-stores-every-child, C38
lookup-at-local-hits, C39 exact-multiple-reload, C40 offloaded-block-multiple, C41 eagle-drops-last-block.

Each check decides from what an engine observes (hits, and the bytes the forward reads), and compares the
connector with itself where no outside oracle knows the right hit: inside a MultiConnector it must store what it
stores alone (C37); asked beyond a local hit it must offer the rest of what it offers at 0 (C38); a prompt of an
exact multiple of the block size must store as much as one token more does (C39); with its stored block 4x and 16x
the GPU block, the partial stored block at a prompt's end is never offered and every whole one is (C40); under
EAGLE / MTP speculative decoding it offers less than without, leaving the last block to recompute, and loads
nothing past its hit (C41)."""

from __future__ import annotations

import math
import time

import pytest

from harness.kv_engine import VLLM_ENGINE
from harness.targets.connector.profile import not_applicable
from harness.targets.connector.target import ConnectorTarget
from reference_impl.connector.factory import load_connector_class
from reference_impl.connector.store import drop_shared_store
from reference_impl.engine.presets import CHUNKED_LOCAL_PRESETS, get_preset
from suites.connector.context import (CheckContext, expect, expect_no_read_errors, local_chunk_of, prompt, read_marks,
                                      scenario)

PARTNER = "reference_impl.connector.lmcache_like:LMCacheLikeConnector"  # the other child of C37's MultiConnector
MULTI = "reference_impl.connector.multi:MultiConnector"


def ask(connector, request, num_computed_tokens: int = 0) -> int:
    """`connector`'s hit for an added, waiting `request` at the local hit `num_computed_tokens`, asked again
    while it answers None (as vLLM's scheduler asks again next step), within `CheckContext.ASK_TIMEOUT_S`."""
    deadline = time.monotonic() + CheckContext.ASK_TIMEOUT_S
    n, _ = connector.get_num_new_matched_tokens(request, num_computed_tokens)
    while n is None and time.monotonic() < deadline:
        time.sleep(0.01)
        n, _ = connector.get_num_new_matched_tokens(request, num_computed_tokens)
    return int(n or 0)


def hit_of(engine, connector, tokens, num_computed_tokens: int = 0) -> int:
    """`connector`'s (one of `engine`'s scheduler-side connectors) hit for a new request of `tokens`; the request is
    then aborted, so every connector of the engine sees its finish."""
    request = engine.add_request(engine.make_request(list(tokens)))
    try:
        return ask(connector, request, num_computed_tokens)
    finally:
        engine.abort_request(request.request_id)


# ---- C37 ----------------------------------------------------------------------------------------------------
def _vllm_multi_not_applicable(ctx: CheckContext) -> None:
    if getattr(ctx.cls, "vllm_children", ()):
        not_applicable("looks each child up on its own, and the children of vLLM's MultiConnector take vLLM's "
                       "request objects, which kvconform's adapter builds only for the connector it wraps: run each "
                       "child as its own vllm:<Name> target (then puts it into a MultiConnector beside "
                       "LMCacheLikeConnector)", check="C37")
    if ctx.kv_engine == VLLM_ENGINE and getattr(ctx.cls, "vllm_name", None):
        from suites.connector.vllm_engine import VLLM_MULTI_CONNECTOR, not_applicable_on_vllm

        not_applicable_on_vllm(VLLM_MULTI_CONNECTOR, check="C37")


class _Child:
    """One child of C37's MultiConnector: its config (as MultiConnector takes it) and how to run it alone."""

    def __init__(self, label: str, config: dict, alone: CheckContext, judged: bool):
        self.label, self.config, self.alone, self.judged = label, config, alone, judged


def _children(ctx: CheckContext, position: str) -> tuple[list[_Child], list[str]]:
    """The children of the MultiConnector C37 runs, and the private stores to drop afterwards. The connector under
    test with LMCacheLikeConnector (`position`: where the connector under test sits), or, when the connector under
    test is kvconform's MultiConnector, its own children."""
    extra = ctx.extra_config()
    if ctx.cls.__module__ + ":" + ctx.cls.__name__ == MULTI:
        children = []
        for index, config in enumerate(extra["connectors"]):
            cls = load_connector_class(config["kv_connector"], config.get("kv_connector_module_path"))
            config = {"kv_connector": cls.__name__, "kv_connector_module_path": cls.__module__, "kv_role": "kv_both",
                      "kv_connector_extra_config": dict(config.get("kv_connector_extra_config") or {})}
            target = ConnectorTarget(f"child{index}", f"{cls.__module__}:{cls.__name__}", "check C37",
                                     extra_config=config["kv_connector_extra_config"])
            alone = CheckContext(target, ctx.preset, kv_engine=ctx.kv_engine)
            alone.profile = ctx.profile
            children.append(_Child(f"child {index} ({cls.__name__})", config, alone, ctx.judges_content))
        return children, []
    mine = _Child(f"the connector under test ({ctx.cls.__name__})",
                  {"kv_connector": ctx.cls.__name__, "kv_connector_module_path": ctx.cls.__module__,
                   "kv_role": "kv_both", "kv_connector_extra_config": extra}, ctx, ctx.judges_content)
    partner_store = f"{ctx.store_name}-c37-partner"
    module, _, name = PARTNER.partition(":")
    partner_extra = {"store_name": partner_store}
    target = ConnectorTarget("partner", PARTNER, "check C37", extra_config=partner_extra)
    alone = CheckContext(target, ctx.preset, kv_engine=ctx.kv_engine)
    partner = _Child(f"the other child ({name})", {"kv_connector": name, "kv_connector_module_path": module,
                                                    "kv_role": "kv_both", "kv_connector_extra_config": partner_extra},
                     alone, True)
    return ([mine, partner] if position == "first" else [partner, mine]), [partner_store]


def _release_multi_rule(ctx: CheckContext) -> dict:
    """The MultiConnector rule of the release a vLLM connector under test comes from: vLLM 0.32.0 on hands the
    children that do not load the request's real blocks, where kvconform's MultiConnector (like vLLM up to 0.22.0)
    hands them an empty table (`harness.targets.connector.vllm_facts.multi_others_get_blocks`, probed on the
    release's own class). A vLLM connector meets only its own release's MultiConnector."""
    if not getattr(ctx.cls, "vllm_name", None):
        return {}
    from harness.targets.connector.vllm_facts import multi_others_get_blocks

    return {"kvconform_others_get_blocks": True} if multi_others_get_blocks() else {}


@pytest.mark.kv_check("C37")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa"])
@pytest.mark.parametrize("position", ["first", "second"])
def test_c37_multiconnector_stores_every_child(ctx, preset, position):
    """A cold request run through a MultiConnector reaches every child's store: afterwards each child, looked up
    on its own, hits the prompt as far as it hits a prompt of the same length it stored alone, and the connector
    under test, read back on its own, serves the oracle's bytes. vLLM's MultiConnector hands every child but the
    one that loads an empty table in update_state_after_alloc, so a child that takes its table only from there
    stores nothing. The connector under test sits first or second beside LMCacheLikeConnector; kvconform's own
    MultiConnector is checked on its own children."""
    _vllm_multi_not_applicable(ctx)
    if position == "second" and ctx.cls.__module__ + ":" + ctx.cls.__name__ == MULTI:
        not_applicable("a MultiConnector under test is checked on its own children, in their own order ('first')")
    model = f"kvconform/{preset}/{ctx.store_name}/c37-{position}"
    length = 700
    children, stores = _children(ctx, position)
    wrapper = None
    try:
        alone_hits = []
        for index, child in enumerate(children):
            engine = child.alone.engine(extra=child.config["kv_connector_extra_config"], model=model)
            tokens = prompt(37_000 + 10 * index, length)
            child.alone.run(engine, tokens)
            alone_hits.append(hit_of(engine, engine.connector, tokens + [7]))
            if child.judged:
                expect(alone_hits[-1] > 0, f"scenario: {child.label}, alone, does not hit a {length}-token prompt "
                                           "it stored")
        multi_extra = {"connectors": [c.config for c in children], **_release_multi_rule(ctx)}
        multi = ConnectorTarget("MultiConnector", MULTI, "check C37", extra_config=multi_extra)
        wrapper = CheckContext(multi, preset, kv_engine=ctx.kv_engine)
        wrapper.profile = ctx.profile  # the connector under test's kind decides what is judged
        engine = wrapper.engine(extra=multi_extra, model=model)
        cold = prompt(37_500, length)
        wrapper.run(engine, cold)
        expect_no_read_errors(engine, "a cold request through the MultiConnector")
        instances = engine.connector.inner.connectors
        for child, instance, alone_hit in zip(children, instances, alone_hits):
            got = hit_of(engine, instance, cold + [7])
            expect(got == alone_hit, f"{child.label} hit {got} tokens of a {length}-token prompt stored through the "
                                     f"MultiConnector ({', '.join(c.label for c in children)}), looked up on its own; "
                                     f"alone it hits {alone_hit} of a prompt of that length: the cold request's "
                                     "stores did not reach it")
        for child in children:
            if child.judged and not child.alone.profile.engine_owned_store:
                reader = child.alone.engine(extra=child.config["kv_connector_extra_config"], model=model)
                since = read_marks(reader)
                child.alone.wipe(reader)
                child.alone.run(reader, cold + [11])
                expect_no_read_errors(reader, f"{child.label} on its own, reloading what the MultiConnector stored",
                                      since=since)
    finally:
        if wrapper is not None:
            wrapper.close()
        for child in children:
            if child.alone is not ctx:
                child.alone.close()
        for store in stores:
            drop_shared_store(store)


# ---- C38 ----------------------------------------------------------------------------------------------------
# Local hits C38 asks at: none, a connector-chunk boundary (256, LMCacheLikeConnector's chunk), and one inside a
# chunk that is still a block boundary (vLLM asks at the local hit rounded down to its block).
LOCAL_HITS = (0, 256, 112)


@pytest.mark.kv_check("C38")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa", "fa+swa+mamba", *CHUNKED_LOCAL_PRESETS])
def test_c38_lookup_at_local_hits(ctx, preset):
    """A 700-token prompt is stored; a reader asks the connector about it at several local hits k: each answer
    must be the rest of what it offers at 0 (k + n == the hit at 0, n == 0 once k reaches it), neither the whole
    hit again nor less. Then the engine itself has the first k tokens in its local prefix cache (computed with the
    connector detached): the request's local plus external hit is the hit at 0, and what it loads reads right."""
    engine = ctx.engine()
    tokens = prompt(38_000 + len(preset), 700)
    ctx.run(engine, tokens)
    reader = ctx.reader(engine)
    reload = tokens + [7]
    full = hit_of(reader, reader.connector, reload)
    expect(full > 0, "scenario: the connector does not hit a 700-token prompt it stored")
    # A local hit is whole blocks: on a layout of larger blocks (one a vLLM release builds, NAME@blockN) a hit
    # inside a chunk rounds down to its block, as the engine's own would.
    block = math.gcd(*(size for _, size, _ in get_preset(preset).groups))
    local_hits = tuple(dict.fromkeys(k - k % block for k in LOCAL_HITS))
    for k in local_hits:
        n = hit_of(reader, reader.connector, reload, k)
        want = max(full - k, 0)
        if n == 0 and k % local_chunk_of(preset):
            continue  # a connector may decline an external suffix that starts inside an attention chunk
        expect(n == want, f"asked about a stored 700-token prompt at a local hit of {k} tokens, the connector offered "
                          f"{n} more; at 0 it offers {full}, so the rest is {want}"
                          + (": it counted the local hit again" if n > want else ": it drops tokens it stored"))
    for k in local_hits[1:]:
        reader.run_until_done()  # the lookups' aborted requests may still wait on the connector (a delayed free)
        ctx.wipe(reader)
        with reader.connector_detached():
            ctx.run(reader, tokens[:k] + [5], max_tokens=1)  # the local prefix cache now holds tokens[:k]
        since = read_marks(reader)
        request = ctx.run(reader, reload)
        local, external = request.num_local_computed_tokens, request.num_external_computed_tokens
        if external == 0 and local % local_chunk_of(preset):
            continue  # declined inside an attention chunk (above): the engine recomputes the rest
        what = f"a reload of a stored 700-token prompt with a local hit of {local} tokens (the first {k} cached)"
        expect(local + external == max(full, local),
               f"{what} got {external} external tokens: local + external = {local + external}, the hit at 0 is "
               f"{full}{scenario('the engine asked at its own local hit')}")
        expect_no_read_errors(reader, what, since=since)


# ---- C39 ----------------------------------------------------------------------------------------------------
# Prompt lengths that are exact multiples of the block size (16): of the chunk and Mamba block too (512), of the
# block only (272).
EXACT_LENGTHS = (512, 272)


def _replay_boundary(engine, length: int) -> int | None:
    """The hit an exact-multiple prompt of `length` tokens may stop at on a model with a sliding-window group: its
    own replay boundary, `length - 1` rounded down to the block. vLLM keeps a sliding-window group's blocks only at
    the prefix-cache checkpoints it retains, by default the latest replay boundary (`prefix_cache_retention_interval`
    0: 'retains only semantic checkpoints, including the latest replay boundary', vLLM 0.32.0-0.34.0
    `config/cache.py`), and OffloadingConnector stores the window reachable there (`reachable_boundaries =
    (req.num_prompt_tokens - 1,)`, 0.33.0 `offloading/scheduler.py` l. 1855, 0.34.0 l. 2021): a documented
    retention choice, not a block lost. None on a model without a sliding-window group."""
    specs = [g.kv_cache_spec for g in engine.kv_cache_config.kv_cache_groups]
    if not any(getattr(spec, "sliding_window", None) for spec in specs):
        return None
    block = min(spec.block_size for spec in specs)
    return (length - 1) // block * block


@pytest.mark.kv_check("C39")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa", "fa+mamba_align"])
def test_c39_exact_multiple_reload(ctx, preset):
    """A prompt of exactly L tokens (L a multiple of the block size) and another of L + 1 are stored; a reload of
    each, three tokens longer, must hit as much: the L-token prompt's last full block was computed in its prefill
    like every other (the classic off-by-one stores only what ends before the last prompt token). The L-token
    prompt then reloads with the oracle's bytes."""
    engine = ctx.engine()
    for length in EXACT_LENGTHS:
        exact = prompt(39_000 + length, length)
        longer = prompt(39_500 + length, length + 1)
        ctx.run(engine, exact, max_tokens=2)
        ctx.run(engine, longer, max_tokens=2)
        reader = ctx.reader(engine)
        got = hit_of(reader, reader.connector, exact + [5, 6, 7])
        want = hit_of(reader, reader.connector, longer + [5, 6])
        expect(want > 0, f"scenario: the connector does not hit a stored {length + 1}-token prompt")
        if got < want and got == _replay_boundary(engine, length):
            continue  # a windowed group kept only the stored prompt's own replay boundary (see _replay_boundary)
        expect(got == want, f"a reload of a stored {length}-token prompt (an exact multiple of the block size) hit "
                            f"{got} tokens; of a stored {length + 1}-token prompt, {want}: "
                            + ("the last full block of the exact-multiple prompt was not stored" if got < want
                               else "it offers more than one token more stores"),
               cause="exact-multiple-short" if got < want else None)
        ctx.expect_reload_correct([exact], f"reloading a stored {length}-token prompt", stored_on=engine)


# ---- C40 ----------------------------------------------------------------------------------------------------
OFFLOAD_RATIOS = (4, 16)  # the connector's stored (offloaded) block, in GPU blocks


def _offload_engine(ctx: CheckContext, option: str, block: int, stored_on=None):
    """An engine whose connectors store blocks of `block` tokens (extra config `option`); a reader of what
    `stored_on` stored when given: the same engine, its local cache forgotten, where the store is the engine's
    own, else a fresh one on the same store."""
    if stored_on is not None and ctx.profile.engine_owned_store:
        stored_on.run_until_done()
        ctx.forget_local_cache(stored_on)
        return stored_on
    if ctx.target.builtin:
        extra = ctx.extra_config(**{option: block})  # a built-in MultiConnector's children get it too
    else:
        extra = dict(ctx.extra_config(), **{option: block})
    return ctx.engine(extra=extra)


@pytest.mark.kv_check("C40")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa"])
@pytest.mark.parametrize("ratio", OFFLOAD_RATIOS)
def test_c40_offloaded_block_multiple(ctx, preset, ratio):
    """The connector stores blocks of `ratio` GPU blocks (its profile's `block_size_option`; vLLM's
    OffloadingConnector: `block_size`). A prompt of three and a half such blocks plus 5 tokens is stored; a reload
    must hit the three whole blocks exactly (the partial one was never stored whole, and offering it loads KV
    nobody stored), read the oracle's bytes, and, with a local hit one GPU block into the second stored block,
    load the rest of it and read right."""
    option = ctx.profile.block_size_option
    if not option:
        not_applicable("sets the size of the blocks the connector stores, and its profile names no "
                       "block_size_option (the extra-config key for it): declare one under \"kvconform\" to run it",
                       check="C40")
    gpu_block = math.lcm(*(size for _kind, size, _window in get_preset(preset).groups))
    block = ratio * gpu_block
    engine = _offload_engine(ctx, option, block)
    length = 3 * block + block // 2 + 5
    tokens = prompt(40_000 + ratio, length)
    ctx.run(engine, tokens)
    reader = _offload_engine(ctx, option, block, stored_on=engine)
    reload = tokens + [7, 8, 9]
    whole = length // block * block
    what = (f"with {option}={block} ({ratio} GPU blocks of {gpu_block}), a stored {length}-token prompt (three whole "
            f"stored blocks and {length - whole} tokens of a fourth)")
    hit = hit_of(reader, reader.connector, reload)
    expect(hit <= whole, f"{what} hit {hit} tokens: it offers {hit - whole} tokens past its last whole stored block (the partial "
                         "block was never stored whole)")
    expect(hit == whole, f"{what} hit {hit} tokens, not its {whole} tokens of whole stored blocks")
    since = read_marks(reader)
    ctx.wipe(reader)
    ctx.run(reader, reload)
    expect_no_read_errors(reader, f"reloading {what}", since=since)
    local = block + gpu_block  # one GPU block into the second stored block
    ctx.wipe(reader)
    with reader.connector_detached():
        ctx.run(reader, tokens[:local] + [5], max_tokens=1)
    since = read_marks(reader)
    request = ctx.run(reader, reload)
    got_local, external = request.num_local_computed_tokens, request.num_external_computed_tokens
    expect(got_local + external == max(whole, got_local),
           f"{what}, reloaded with a local hit of {got_local} tokens, got {external} external tokens: local + "
           f"external = {got_local + external}, not the {whole} stored")
    expect_no_read_errors(reader, f"{what}, reloaded with a local hit inside a stored block", since=since)


# ---- C41 ----------------------------------------------------------------------------------------------------
SPECULATIVE = {"eagle-1": ("eagle", 1), "mtp-2": ("mtp", 2)}  # speculative method and tokens per step
#: The stored prompt: two chunks of kvconform's connector (256 tokens) and a partial one, so a hit of two chunks
#: less the dropped block still loads something (a load past the hit shows).
C41_PROMPT = 700


def _hash_lookahead_tokens(engine) -> int:
    """Tokens past its block a block hash covers on `engine` (vLLM's scheduler resolves it from the speculative
    config and the connector, 0.33+; kvconform's engine: 0, it drops a hit's last block instead)."""
    return int(getattr(engine.scheduler, "num_hash_lookahead_tokens", 0) or 0)


@pytest.mark.kv_check("C41")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa"])
@pytest.mark.parametrize("speculative", list(SPECULATIVE))
def test_c41_eagle_drops_last_block(ctx, preset, speculative):
    """With an EAGLE-style drafter (EAGLE, MTP; `vllm_config.speculative_config.use_eagle()`), the drafter needs the
    hidden states of a hit's last block, which no cache holds, so vLLM drops that block from its local prefix hit
    and a connector must leave it too: a stored 700-token prompt, looked up on an engine with speculative decoding,
    must hit at least one block less than on one without (the same connector, the same prompt stored), and the
    load, guarded by canaries on the request's blocks past the hit, must write none of them and read right."""
    from reference_impl.engine.core import SpeculativeConfig
    from suites.connector.test_data_path import _own_blocks_fence

    method, tokens = SPECULATIVE[speculative]
    spec = SpeculativeConfig(method, tokens)
    if getattr(ctx.cls, "vllm_name", None):
        not_applicable("vLLM's connectors owe the EAGLE drop only to the drafter's own KV cache groups (a drafter "
                       "block served one block stale lowers acceptance, the target verifying every draft: vLLM "
                       "0.34 offloading/scheduler.py:209-233 serves every block when no group holds draft layers), "
                       "and kvconform's presets carry no draft layers")
    block = min(g[1] for g in get_preset(preset).groups)
    prompts = {}
    hits = {}
    for label, config in (("without", None), ("with", spec)):
        engine = ctx.engine(speculative_config=config, model=f"kvconform/{preset}/{ctx.store_name}/c41-{label}")
        tokens_ = prompt(41_000 + len(preset), C41_PROMPT)
        ctx.run(engine, tokens_)
        ctx.forget_local_cache(engine)
        hits[label] = hit_of(engine, engine.connector, tokens_ + [7])
        prompts[label] = (engine, tokens_)
    plain, eagle = hits["without"], hits["with"]
    expect(plain > 0,
           f"scenario: the connector does not hit a {C41_PROMPT}-token prompt it stored (without speculation)")
    engine = prompts["with"][0]
    lookahead = _hash_lookahead_tokens(engine)
    if lookahead:
        # The engine keys blocks with the tokens past them (vLLM 0.33+ for a connector that supports lookahead
        # hashes): a hit proves the token after it, so the drafter's KV of its last block is right and nothing is
        # dropped. The property left: speculation never lengthens a hit.
        expect(eagle <= plain,
               f"with {method} speculative decoding and block hashes covering {lookahead} token(s) past each block, "
               f"a stored {C41_PROMPT}-token prompt hit {eagle} tokens, more than the {plain} it hits without")
        return
    expect(eagle <= plain - block,
           f"with {method} speculative decoding ({tokens} token{'s' if tokens > 1 else ''}), a stored {C41_PROMPT}-token "
           f"prompt hit {eagle} tokens; without, {plain}: the hit keeps its last block ({block} tokens), whose hidden states "
           "the drafter needs and no cache holds (it must be recomputed)")
    engine, tokens_ = prompts["with"]
    ctx.wipe(engine)
    fence = _own_blocks_fence(ctx, engine) if ctx.judges_content else None
    if fence is not None:
        ctx.around["start_load_kv"] = fence
    since = read_marks(engine)
    try:
        request = ctx.run(engine, tokens_ + [7])
    finally:
        ctx.around.pop("start_load_kv", None)
    expect(request.num_local_computed_tokens + request.num_external_computed_tokens <= plain - block,
           f"with {method} speculative decoding the engine's reload hit {request.num_external_computed_tokens} "
           f"external tokens: the last block of the {plain}-token hit was not left to recompute")
    expect_no_read_errors(engine, f"a reload with {method} speculative decoding", since=since)
