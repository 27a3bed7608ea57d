"""Spec 4.2, API shape: C01 declares-hma, C02 scheduler-role-cpu, C03 group-discovery, C12 meta-pure,
C13 finish-hook-shapes."""

from __future__ import annotations

import copy
import dataclasses
import json
import pickle

import pytest

from harness import outcomes
from harness.targets.connector.profile import not_applicable
from harness.targets.connector.vllm_layouts import mamba_none_block, release_of
from reference_impl.connector.base import KVConnectorRole, supports_hma
from reference_impl.connector.factory import check_constructor
from reference_impl.engine.presets import CORE_PRESETS, get_preset
from reference_impl.kv_cache.kv_cache_interface import AttentionSpec, KVCacheGroupSpec
from suites.connector.context import expect, expect_full_hit, expect_no_read_errors, prompt
from suites.connector.oracles import broken_canaries, fence_evidence, fill_canaries


@pytest.mark.kv_check("C01")
def test_c01_declares_hma(ctx):
    """The class declares HMA, overrides the HMA finish hook and has vLLM 0.33's constructor."""
    if not supports_hma(ctx.cls):
        outcomes.not_applicable("declaration", f"{ctx.cls.__name__} does not declare SupportsHMA")
    hook = getattr(ctx.cls, "request_finished_all_groups", None)
    expect(hook is not None and not getattr(hook, "__isabstractmethod__", False),
           f"{ctx.cls.__name__}.request_finished_all_groups is not implemented")
    try:
        check_constructor(ctx.cls)
    except ValueError as exc:
        expect(False, str(exc))
    engine = ctx.engine("fa+swa")
    expect(engine.connector is not None and engine.workers[0].connector is not None,
           "both roles must construct with a two-group KVCacheConfig")
    # The declaration is exercised: on a two-group model the engine calls only request_finished_all_groups,
    # and the blocks it frees go straight to the next request.
    engine, first = ctx.forced_finish_reuse(preset="fa+swa")
    ctx.drain(engine, "SupportsHMA declared, on a two-group model")
    ctx.expect_reload_correct([ctx.reload_prompt(first)], "SupportsHMA declared: a request whose blocks were handed to the next request "
                                       "right after request_finished_all_groups was stored with that request's bytes",
                              preset="fa+swa", stored_on=engine)


@pytest.mark.kv_check("C02")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa+mamba"])
def test_c02_scheduler_role_cpu(ctx, preset, monkeypatch):
    """The scheduler instance never needs worker state and runs on a machine without a GPU."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    engine = ctx.engine()
    for seed in range(3):
        ctx.run(engine, prompt(seed, 300))
    worker_only = {"register_kv_caches", "start_load_kv", "wait_for_layer_load", "save_kv_layer", "wait_for_save",
                   "get_transfer_results", "get_finished", "bind_connector_metadata"}
    misplaced = {c[1] for c in ctx.calls if c[0] == KVConnectorRole.SCHEDULER and c[1] in worker_only}
    expect(not misplaced, f"engine bug: worker hooks on the scheduler instance: {sorted(misplaced)}")
    expect(ctx.calls_of("build_connector_meta", KVConnectorRole.SCHEDULER),
           "the scheduler instance never built metadata")
    ctx.drain(engine, "after a 3-request script")
    ctx.expect_reload_correct([prompt(seed, 300) for seed in range(3)], "reloading the 3-request script",
                              stored_on=engine)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CrossAttentionSpec(AttentionSpec):
    """vLLM's cross-attention spec (encoder KV); not prefix-cacheable by a token-prefix connector."""


def _loaded_groups(inner, probe, default: tuple[int, ...]) -> tuple[int, ...]:
    """The groups `inner` would load for `probe`, asked as vLLM's scheduler asks: after a lookup.

    vLLM calls `get_loaded_kv_cache_group_ids` only for a request the same instance has just looked up (and
    only after a hit); a MultiConnector answers from the child that served that lookup. A hook that cannot
    answer for a request without a hit is outside that contract: such a request loads nothing."""
    hook = getattr(inner, "get_loaded_kv_cache_group_ids", None)
    on_new = getattr(inner, "on_new_request", None)
    if on_new is not None:  # vLLM's add_request, before any lookup
        on_new(probe)
    hit, _ = inner.get_num_new_matched_tokens(probe, 0)
    if hook is None:
        return default
    try:
        return tuple(hook(probe))
    except Exception:
        if hit:
            raise
        return ()


def _scheduler_instance(ctx, engine, kv_cache_config):
    """A scheduler-role instance on `kv_cache_config`, bound to `engine`'s KV cache manager as vLLM's scheduler
    binds its connector before any lookup (OffloadingConnector asks the manager how far the groups it does not
    offload reach)."""
    inner = ctx.cls(engine.config, KVConnectorRole.SCHEDULER, kv_cache_config)
    bind = getattr(inner, "bind_kv_cache_manager", None)
    if bind is not None:
        bind(engine.manager)
    return inner


def _start_or_skip(ctx, engine, kv_cache_config, gid: int, what: str, names: tuple[str, ...]) -> None:
    """Build the scheduler role on `kv_cache_config`: a ValueError naming the spec, or group `gid` left out."""
    probe = engine.make_request(prompt(3, 40))
    try:
        inner = _scheduler_instance(ctx, engine, kv_cache_config)
    except ValueError as exc:
        expect(any(n.lower() in str(exc).lower() for n in names) or f"[{gid}]" in str(exc),
               f"{what}: the start-up ValueError does not name the spec or the group: {exc}")
        return
    # Without a loaded-groups hook, vLLM assumes every prefix-cacheable group is restored: a silent accept.
    loaded = _loaded_groups(inner, probe, tuple(range(len(kv_cache_config.kv_cache_groups))))
    expect(gid not in loaded, f"{what} (group {gid}) was accepted silently: no start-up ValueError, "
                              f"and it is among the loaded groups {loaded}")


@pytest.mark.kv_check("C03")
@pytest.mark.parametrize("preset", ["fa+swa+mamba"])
def test_c03_group_discovery_rejects(ctx, preset):
    """enable_kv_transfer=False groups are left out; cross-attention and Mamba mode 'none' groups are
    rejected at start with a ValueError naming them (or left out), never served silently."""
    ctx.require("loaded_group_ids")  # "left out" is the connector's own answer of the groups it loads
    engine = ctx.engine()
    base = get_preset(preset).kv_cache_config(64)
    probe = engine.make_request(prompt(3, 40))
    off = copy.deepcopy(base)
    off.kv_cache_groups[1].enable_kv_transfer = False
    inner = _scheduler_instance(ctx, engine, off)
    loaded = _loaded_groups(inner, probe, ())
    expect(1 not in loaded, f"group 1 has enable_kv_transfer=False but the connector loads it (groups {loaded})")
    spec = base.kv_cache_groups[0].kv_cache_spec
    crossed = copy.deepcopy(base)
    crossed.kv_cache_groups.append(KVCacheGroupSpec(
        layer_names=["model.layers.99.cross"],
        kv_cache_spec=CrossAttentionSpec(block_size=spec.block_size, num_kv_heads=spec.num_kv_heads,
                                         head_size=spec.head_size, dtype=spec.dtype)))
    if not ctx.target.spec.startswith("vllm:"):
        # vLLM's own engine never hands a connector a cross-attention group (it refuses encoder-decoder models
        # with a KV connector), so its in-tree connectors are not judged on one.
        _start_or_skip(ctx, engine, crossed, 3, "a cross-attention group", ("CrossAttention", "cross"))
    if ctx.profile.stores_kv:
        # A cache cannot serve a Mamba group that keeps no state per boundary; a dummy-KV or transfer-only
        # connector fills or sends the state it is asked for, so that half applies to caches only (spec 4.2 C03).
        no_cache = copy.deepcopy(base)
        mamba = no_cache.kv_cache_groups[2]
        mamba.kv_cache_spec = dataclasses.replace(mamba.kv_cache_spec, mamba_cache_mode="none")
        if release_of(ctx.target, ctx.kv_engine):
            # Only a layout the release builds: its 'none' Mamba group keeps one state for the model's length.
            mamba.kv_cache_spec = dataclasses.replace(mamba.kv_cache_spec,
                                                      block_size=mamba_none_block(engine.config.max_model_len))
        _start_or_skip(ctx, engine, no_cache, 2, "a Mamba group in mamba_cache_mode='none'",
                       ("mamba_cache_mode", "'none'"))


@pytest.mark.kv_check("C03")
@pytest.mark.parametrize("preset", ["scratch_group"])
def test_c03_group_discovery_scratch(ctx, preset):
    """A scratch group (prefix_cacheable=False, group 1 of the preset) is skipped: the connector starts,
    serves the full-attention group, and never writes the scratch group's blocks nor declares it loaded."""
    if not ctx.profile.stores_kv:
        not_applicable("(scratch group) does not apply: a connector that stores no KV stands in for the prefill, "
                       "which writes the request's scratch-group blocks too", check="C03")
    engine = ctx.engine()
    scratch = 1
    expect(not engine.kv_cache_config.kv_cache_groups[scratch].kv_cache_spec.prefix_cacheable,
           "scenario: group 1 of scratch_group is not a scratch group")
    tokens = prompt(30, 700)
    ctx.run(engine, tokens)
    ctx.wipe(engine)
    fenced: dict = {}

    def before(role, *args):
        if role != KVConnectorRole.WORKER:
            return
        blocks = set()
        for request in engine.scheduler.requests.values():
            if engine.manager.coordinator.has_request(request.request_id):
                blocks.update(b for b in engine.manager.get_block_ids(request.request_id)[scratch] if b)
        fill_canaries(engine, blocks)
        fenced["blocks"] = blocks

    def after(role, result, *args):
        blocks = fenced.pop("blocks", None)
        if blocks:
            broken = broken_canaries(engine, blocks)
            expect(not broken, fence_evidence(broken, "the load wrote a block of the scratch group (prefix_cacheable=False)"))

    ctx.around["start_load_kv"] = (before, after)
    reload = ctx.run(engine, tokens + [7, 8, 9])
    expect_full_hit(ctx, engine, reload, "next to a scratch group (it must neither limit nor block the hit)")
    loaded = [c[3] for c in ctx.calls_of("get_loaded_kv_cache_group_ids", KVConnectorRole.SCHEDULER)]
    expect(all(scratch not in tuple(g) for g in loaded), f"the scratch group is declared loaded: {loaded}")
    expect_no_read_errors(engine, "after a reload next to a scratch group")


def _without_scheduler_locals(so):
    """`so` less what is not the schedule: the metadata being built, and vLLM's scheduler-local
    `kv_connector_block_state` (a view of the scheduler's own manager, dropped before dispatch)."""
    local = {"kv_connector_block_state": None} if hasattr(so, "kv_connector_block_state") else {}
    return dataclasses.replace(so, kv_connector_metadata=None, **local)


@pytest.mark.kv_check("C12")
@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c12_meta_pure(ctx, preset):
    """build_connector_meta leaves the SchedulerOutput as it was, and its metadata round-trips pickle."""
    seen = []

    def before(role, so):
        seen.append(copy.deepcopy(_without_scheduler_locals(so)))

    def after(role, meta, so):
        snapshot = seen.pop()
        current = _without_scheduler_locals(so)
        # The documented carve-out: a synchronous reader may drop blocks from new_block_ids_to_zero (a field
        # vLLM's own SchedulerOutput lacks before 0.18.0, under --kv-engine vllm).
        if hasattr(snapshot, "new_block_ids_to_zero"):
            current = dataclasses.replace(current, new_block_ids_to_zero=snapshot.new_block_ids_to_zero)
        expect(current == snapshot, "build_connector_meta mutated the SchedulerOutput")
        try:
            pickle.loads(pickle.dumps(meta))
        except Exception as exc:
            expect(False, f"connector metadata does not pickle: {type(exc).__name__}: {exc}")

    ctx.around["build_connector_meta"] = (before, after)
    engine = ctx.engine()
    ctx.store_then_reload(engine, prompt(1, 600))
    expect_no_read_errors(engine, "meta-pure scenario")


@pytest.mark.kv_check("C13")
@pytest.mark.parametrize("preset", CORE_PRESETS)
def test_c13_finish_hook_shapes(ctx, preset):
    """Real finish-hook shapes are accepted; results are (bool, JSON-serialisable dict or None), once each."""
    engine = ctx.engine()
    done = [ctx.run(engine, prompt(seed, 700)) for seed in range(2)]
    waiting = engine.add_request(engine.make_request(prompt(9, 300)))
    engine.abort_request(waiting.request_id)  # never scheduled: every group's list is empty
    hook = "request_finished_all_groups" if ctx.is_hma else "request_finished"
    calls = ctx.calls_of(hook, KVConnectorRole.SCHEDULER)
    ids = [c[2][0].request_id for c in calls]
    for request in done + [waiting]:
        expect(ids.count(request.request_id) == 1,
               f"{hook} called {ids.count(request.request_id)} times for {request.request_id}")
    for _role, _name, args, result in calls:
        expect(isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], bool),
               f"{hook} returned {result!r}; expected (bool, dict | None)")
        params = result[1]
        expect(params is None or isinstance(params, dict), f"{hook} returned params {params!r}")
        try:
            json.dumps(params)
        except TypeError as exc:
            expect(False, f"kv_transfer_params are not JSON-serialisable: {exc}")
    if ctx.is_hma and len(engine.kv_cache_config.kv_cache_groups) > 1:
        shapes = [c[2][1] for c in calls]
        expect(all(isinstance(s, tuple) and len(s) == len(engine.kv_cache_config.kv_cache_groups) for s in shapes),
               "request_finished_all_groups did not get one list per group")
