"""Small helpers shared by the allocator scenarios (ids, queue order, driving a request)."""

from __future__ import annotations

import re
from contextlib import contextmanager
from types import SimpleNamespace

import pytest

from harness import outcomes
from harness.targets.allocator.target import GroupDesc, PlanningTarget, target_module
from suites.allocator.conftest import require

__all__ = ["ids", "queue_ids", "prefill", "allocate", "remove_skipped", "new_step", "tables", "HISPARSE_MODULES", "hisparse_api", "PLANNING_MODULES",
           "planning_api", "refused", "extension"]


def ids(blocks) -> list[int]:
    """Block ids of a block list."""
    return [b.block_id for b in blocks]


def queue_ids(pool) -> list[int]:
    """Free-queue block ids, head (reused first) to tail."""
    return ids(pool.free_block_queue.get_all_free_blocks())


def prefill(manager, request, chunk: int | None = None, use_hits: bool = True) -> int:
    """Admit `request` (prefix lookup + chunked prefill of the whole prompt); returns the hit length."""
    hit = 0
    blocks = None
    if use_hits:
        blocks, hit, boundary = manager.get_computed_blocks(request)
        request.shared_prefix_boundary = boundary
    remaining = request.num_prompt_tokens - hit
    first = True
    while remaining > 0:
        n = remaining if chunk is None else min(chunk, remaining)
        if first:
            out = manager.allocate_slots(request, n, hit, blocks if hit else None)
            request.num_computed_tokens = hit
            first = False
        else:
            out = manager.allocate_slots(request, n)
        assert out is not None, f"allocation of {n} tokens for {request.request_id} unexpectedly failed"
        request.num_computed_tokens += n
        remaining -= n
    return hit


def allocate(target, manager, request, num_new_tokens: int, local_hit: int = 0, hit_blocks=None, *,
             external: int = 0, delay_cache_blocks: bool = False, lookahead: int = 0):
    """`allocate_slots` as the release's scheduler calls it: with `num_external_computed_tokens` where the release
    takes it (capability `external_computed_tokens`); before it (0.13) the scheduler counted a connector's tokens
    into `num_new_tokens`. `lookahead` is `num_lookahead_tokens` (a speculative drafter's slots)."""
    kwargs = dict(delay_cache_blocks=delay_cache_blocks) if delay_cache_blocks else {}
    if lookahead:
        kwargs["num_lookahead_tokens"] = lookahead
    if external and "external_computed_tokens" in getattr(target, "lacks", {}):
        num_new_tokens += external
    elif external:
        kwargs["num_external_computed_tokens"] = external
    return manager.allocate_slots(request, num_new_tokens, local_hit, hit_blocks if local_hit else None, **kwargs)


def remove_skipped(target, manager, request_id: str, num_computed_tokens: int, *more) -> None:
    """`remove_skipped_blocks` as the release offers it: the manager's method (capability `remove_skipped_blocks`,
    0.14 on, which also takes the prompt length) or, before it (0.13), the coordinator's, which the manager's own
    allocate_slots calls: the same window skipping, reached through the release's own call."""
    if "remove_skipped_blocks" in getattr(target, "lacks", {}):
        manager.coordinator.remove_skipped_blocks(request_id, num_computed_tokens)
    else:
        manager.remove_skipped_blocks(request_id, num_computed_tokens, *more)


def new_step(target, manager) -> None:
    """Start a scheduling step as the release's scheduler does: `KVCacheManager.new_step_starts()` where the
    release has it (capability `new_step_starts`); a release without it (0.16 and earlier) keeps no per-step
    state, and its scheduler calls nothing between steps."""
    if "new_step_starts" not in getattr(target, "lacks", {}):
        manager.new_step_starts()


def tables(manager, request) -> list[list[int]]:
    """The request's block ids per group, as lists."""
    return [list(g) for g in manager.get_block_ids(request.request_id)]


# vLLM's module names the scenarios below use, as the target's module map names them.
HISPARSE_MODULES = {"iface": "v1.kv_cache_interface", "utils": "v1.core.kv_cache_utils",
                    "stm": "v1.core.single_type_kv_cache_manager", "manager": "v1.core.kv_cache_manager",
                    "pool": "v1.core.block_pool", "layout": "v1.hisparse.layout", "coordinator": "v1.hisparse.coordinator"}


def _mapped(target, names: dict[str, str]) -> dict:
    """`names` (short name -> module name in the target's map), imported; skips naming what the map lacks."""
    found = {key: target_module(target, name) for key, name in names.items()}
    missing = [names[key] for key, module in found.items() if module is None]
    if missing:
        outcomes.not_applicable("feature", f"target {target.name!r} maps no module for {', '.join(missing)}")
    return found


def hisparse_api(target) -> SimpleNamespace:
    """The target's spec module, kv_cache_utils, managers, KVCacheManager, block pool, HiSparse layout helpers,
    and `bind(manager)`: what must run before the first admission (build its HiSparse coordinator). Reached
    through the target's module map, so any target that maps vLLM's modules runs these scenarios."""
    require(target, "hisparse")  # a vLLM release before HiSparse: N/A on it
    found = _mapped(target, HISPARSE_MODULES)
    return SimpleNamespace(**{k: v for k, v in found.items() if k != "coordinator"},
                           bind=found["coordinator"].get_hisparse_coordinator)


# vLLM's module names the planning scenarios use (the planner sits in kv_cache_utils before 0.33: the target's
# map says where).
PLANNING_MODULES = {"iface": "v1.kv_cache_interface", "planner": "v1.core.kv_cache_planning",
                    "utils": "v1.core.kv_cache_utils", "manager": "v1.core.kv_cache_manager"}


def planning_api(target, *capabilities: str) -> SimpleNamespace:
    """The target's planning API, after `grouping` and `capabilities` (N/A on a release without them): its spec
    module (`iface`), planner, kv_cache_utils, KVCacheManager module, `spec(kind, **fields)` (a `GroupDesc`,
    built with the target's own spec classes) and `config(**kw)` (the config its planner reads:
    `PlanningTarget.planning_config`)."""
    require(target, "grouping")
    for capability in capabilities:
        require(target, capability)
    if not isinstance(target, PlanningTarget):
        outcomes.not_applicable("feature", f"target {target.name!r} has no make_spec / planning_config "
                                           "(PlanningTarget)")
    return SimpleNamespace(**_mapped(target, PLANNING_MODULES),
                           spec=lambda kind, **fields: target.make_spec(GroupDesc(kind, **fields)),
                           config=target.planning_config)


@contextmanager
def refused(target, errors=(ValueError, AssertionError), *, match: str | None = None, strict_match: str):
    """Bad input a scenario feeds: every implementation refuses it, raising one of `errors` (vLLM often with
    an assert) whose text matches `match`; a target declaring `strict_input_validation` with a one-line
    error naming the field and value, matching `strict_match`."""
    with pytest.raises(errors, match=match) as info:
        yield info
    if "strict_input_validation" in target.capabilities:
        assert re.search(strict_match, str(info.value)), f"a strict target names what it refuses: {info.value!r}"


def extension(target, capability: str, module: str):
    """The module of a kvconform extension (`REFERENCE_EXTENSIONS`: no vLLM counterpart) the target's map keeps
    under `module`, after `capability` (N/A on a target without it, e.g. every vLLM release)."""
    require(target, capability)
    return _mapped(target, {"module": module})["module"]
