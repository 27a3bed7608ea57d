"""Every allocator invariant (suites/allocator/invariants.py) can fail: a deliberately broken reference trips it.

Each mutant patches one thing of the reference allocator (pytest's monkeypatch, undone after the test) the way a
real bug would break it, then runs the suite's own workload; the invariant it breaks must be among the
violations. The unbroken reference runs the same workloads without any violation (`suites/allocator/
test_invariants.py` on the reference, in the README test command).
"""

from __future__ import annotations

import functools

import pytest

import reference_impl.kv_cache.block_pool as block_pool
import reference_impl.kv_cache.kv_cache_manager as kv_cache_manager
import reference_impl.kv_cache.kv_cache_utils as kv_cache_utils
from harness.targets.allocator.target import make_reference_target
from suites.allocator.invariants import INVARIANTS, LAYOUTS, run_workload
from suites.allocator.test_invariants import NUM_STEPS, SEEDS

BlockPool = block_pool.BlockPool
KVCacheManager = kv_cache_manager.KVCacheManager


def _wrap(monkeypatch, cls, name, make):
    """Replace `cls.name` by `make(original)`, which keeps the original's signature (the target reads it)."""
    original = getattr(cls, name)
    monkeypatch.setattr(cls, name, functools.update_wrapper(make(original), original))


# ------------------------------------------------------------------------------------------------ mutants
def counter_drifts(monkeypatch):
    """A pool whose free counter loses one block on every multi-block allocation."""
    def make(original):
        def get_new_blocks(self, num_blocks):
            out = original(self, num_blocks)
            if num_blocks > 1 and self.free_block_queue.num_free_blocks > 0:
                self.free_block_queue.num_free_blocks -= 1
            return out
        return get_new_blocks
    _wrap(monkeypatch, BlockPool, "get_new_blocks", make)


def hit_leaves_block_queued(monkeypatch):
    """A prefix hit takes a reference but leaves a free cached block in the free queue."""
    def touch(self, blocks):
        for block in blocks:
            if not block.is_null:
                block.ref_cnt += 1
    monkeypatch.setattr(BlockPool, "touch", touch)


def shared_hit_not_counted(monkeypatch):
    """A hit on a block another request holds takes no reference (its ref count undercounts its owners)."""
    def make(original):
        def touch(self, blocks):
            original(self, [b for b in blocks if b.ref_cnt == 0])
        return touch
    _wrap(monkeypatch, BlockPool, "touch", make)


def null_block_handed_out(monkeypatch):
    """A multi-block allocation hands out the null block as its last block."""
    def make(original):
        def get_new_blocks(self, num_blocks):
            out = original(self, num_blocks)
            if num_blocks > 1:
                out[-1] = self.null_block
            return out
        return get_new_blocks
    _wrap(monkeypatch, BlockPool, "get_new_blocks", make)


def hit_covers_whole_prompt(monkeypatch):
    """The hit cap forgets that the prompt's last token must be computed."""
    monkeypatch.setattr(kv_cache_manager, "_max_hit_length", lambda request, bound=None: request.num_tokens)


def hit_blocks_out_of_order(monkeypatch):
    """A lookup serves its first two hit blocks swapped."""
    def make(original):
        def get_computed_blocks(self, request, *args, **kwargs):
            blocks, hit, boundary = original(self, request, *args, **kwargs)
            first = list(blocks.blocks[0])
            if len(first) >= 2:
                first[0], first[1] = first[1], first[0]
                blocks = kv_cache_manager.KVCacheBlocks((first, *blocks.blocks[1:]))
            return blocks, hit, boundary
        return get_computed_blocks
    _wrap(monkeypatch, KVCacheManager, "get_computed_blocks", make)


def reused_block_keeps_key(monkeypatch):
    """A cached free block handed out as new keeps its prefix-cache entry."""
    def make(original):
        def get_new_blocks(self, num_blocks):
            keys = {b.block_id: b.block_hash for b in self.blocks[1:] if b.ref_cnt == 0 and b.block_hash is not None}
            out = original(self, num_blocks)
            for block in out:
                if block.block_id in keys:
                    block.block_hash = keys[block.block_id]
                    self.cached_block_hash_to_block.insert(block.block_hash, block)
            return out
        return get_new_blocks
    _wrap(monkeypatch, BlockPool, "get_new_blocks", make)


def untagged_extra_keys(monkeypatch):
    """Block hashes take a LoRA adapter's name and a cache salt as bare strings (vLLM before 0.31)."""
    original = kv_cache_utils._extra_keys

    def extra_keys(request, start, end, start_mm_idx=0):
        keys, mm_idx = original(request, start, end, start_mm_idx)
        return (tuple(k[1] for k in keys) if keys else None), mm_idx
    monkeypatch.setattr(kv_cache_utils, "_extra_keys", extra_keys)


def window_hit_block_nulled(monkeypatch):
    """A hybrid lookup serves the null block where the sliding-window group reads its last hit block."""
    def make(original):
        def get_computed_blocks(self, request, *args, **kwargs):
            blocks, hit, boundary = original(self, request, *args, **kwargs)
            if len(blocks.blocks) > 1 and blocks.blocks[1]:
                window = list(blocks.blocks[1])
                window[-1] = self.block_pool.null_block
                blocks = kv_cache_manager.KVCacheBlocks((blocks.blocks[0], window, *blocks.blocks[2:]))
            return blocks, hit, boundary
        return get_computed_blocks
    _wrap(monkeypatch, KVCacheManager, "get_computed_blocks", make)


def new_block_is_a_held_cached_block(monkeypatch):
    """A single-block allocation hands out a cached block another request still holds."""
    def make(original):
        def get_new_blocks(self, num_blocks):
            held = [b for b in self.blocks[1:] if b.ref_cnt > 0 and b.block_hash is not None]
            if num_blocks != 1 or not held:
                return original(self, num_blocks)
            held[0].ref_cnt += 1
            return [held[0]]
        return get_new_blocks
    _wrap(monkeypatch, BlockPool, "get_new_blocks", make)


def loaded_blocks_cached_before_the_load(monkeypatch):
    """Blocks an asynchronous connector load fills are cached at allocation (delay_cache_blocks ignored)."""
    def make(original):
        def allocate_slots(self, request, *args, **kwargs):
            kwargs.pop("delay_cache_blocks", None)
            return original(self, request, *args, **kwargs)
        return allocate_slots
    _wrap(monkeypatch, KVCacheManager, "allocate_slots", make)


def eviction_frees_held_blocks(monkeypatch):
    """evict_blocks also drops a reference of each block it is given that a request holds."""
    def make(original):
        def evict_blocks(self, block_ids):
            original(self, block_ids)
            self.free_blocks([self.blocks[i] for i in block_ids if self.blocks[i].ref_cnt > 0])
        return evict_blocks
    _wrap(monkeypatch, BlockPool, "evict_blocks", make)


def table_positions_swap(monkeypatch):
    """After an allocation, the first two blocks of the request's first group trade places."""
    def make(original):
        def allocate_slots(self, request, *args, **kwargs):
            out = original(self, request, *args, **kwargs)
            table = self.coordinator.single_type_managers[0].req_to_blocks.get(request.request_id)
            if out is not None and table is not None and len(table) >= 3:
                table[0], table[1] = table[1], table[0]
            return out
        return allocate_slots
    _wrap(monkeypatch, KVCacheManager, "allocate_slots", make)


def full_pool_raises(monkeypatch):
    """A step the pool cannot hold raises instead of returning None."""
    def make(original):
        def allocate_slots(self, request, *args, **kwargs):
            out = original(self, request, *args, **kwargs)
            if out is None:
                raise ValueError("Cannot get free blocks from the pool")
            return out
        return allocate_slots
    _wrap(monkeypatch, KVCacheManager, "allocate_slots", make)


def window_skips_scheduled_drafts(monkeypatch):
    """Window skipping counts the step's scheduled tokens (drafts included) as computed: a sliding-window group
    frees blocks the step's first token still reads (and that a rollback after rejected drafts needs)."""
    def make(original):
        def allocate_slots(self, request, num_new_tokens, *args, **kwargs):
            self.remove_skipped_blocks(request.request_id, request.num_computed_tokens + num_new_tokens,
                                       request.num_prompt_tokens)
            return original(self, request, num_new_tokens, *args, **kwargs)
        return allocate_slots
    _wrap(monkeypatch, KVCacheManager, "allocate_slots", make)


def lookahead_ignored(monkeypatch):
    """allocate_slots reserves no slots for the drafter's lookahead tokens."""
    def make(original):
        def allocate_slots(self, request, *args, **kwargs):
            kwargs["num_lookahead_tokens"] = 0
            return original(self, request, *args, **kwargs)
        return allocate_slots
    _wrap(monkeypatch, KVCacheManager, "allocate_slots", make)


def drafts_hashed_before_verification(monkeypatch):
    """The step's draft tokens join the request's tokens while it is allocated (and hashed, so the blocks they
    fill are cached), then leave again: a block keyed under a hash that covers drafts the verifier rejects."""
    def make(original):
        def allocate_slots(self, request, *args, **kwargs):
            drafts = list(request.spec_token_ids)
            if not drafts:
                return original(self, request, *args, **kwargs)
            request.append_output_token_ids(drafts)
            try:
                return original(self, request, *args, **kwargs)
            finally:
                del request._all_token_ids[-len(drafts):]
                del request._output_token_ids[-len(drafts):]
        return allocate_slots
    _wrap(monkeypatch, KVCacheManager, "allocate_slots", make)


#: invariant -> (mutant, layout it runs on).
MUTANTS = {
    "INV-KV-01": (counter_drifts, "full"),
    "INV-KV-02": (hit_leaves_block_queued, "full"),
    "INV-KV-03": (shared_hit_not_counted, "full"),
    "INV-KV-04": (null_block_handed_out, "full+swa"),
    "INV-KV-05": (hit_covers_whole_prompt, "full"),
    "INV-KV-06": (hit_blocks_out_of_order, "full"),
    "INV-KV-07": (reused_block_keeps_key, "full"),
    "INV-KV-08": (untagged_extra_keys, "full"),
    "INV-KV-09": (window_hit_block_nulled, "full+swa"),
    "INV-KV-10": (new_block_is_a_held_cached_block, "full"),
    "INV-KV-11": (loaded_blocks_cached_before_the_load, "full"),
    "INV-KV-12": (eviction_frees_held_blocks, "full"),
    "INV-KV-13": (table_positions_swap, "full"),
    "INV-KV-14": (full_pool_raises, "full+swa"),
    "INV-KV-15": (window_skips_scheduled_drafts, "full+swa-mtp2"),
    "INV-KV-16": (lookahead_ignored, "full+swa8+swa16-eagle2"),
    "INV-KV-17": (drafts_hashed_before_verification, "full-eagle1"),
}


def test_every_invariant_has_a_mutant():
    assert set(MUTANTS) == set(INVARIANTS)


@pytest.mark.parametrize("invariant", list(MUTANTS))
def test_mutant_trips_its_invariant(invariant, monkeypatch):
    mutant, layout = MUTANTS[invariant]
    mutant(monkeypatch)
    target = make_reference_target()
    found = []
    for seed in SEEDS:  # the suite's seeds, stopping at the first that trips it
        found.append(run_workload(target, LAYOUTS[layout], seed, NUM_STEPS).violations)
        if invariant in found[-1]:
            return
    pytest.fail(f"{mutant.__name__} on {layout} did not trip {invariant}: {found}")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_workload_exercises_what_the_invariants_judge(layout):
    """On the unbroken reference every layout's workload serves hits (and connector loads where the layout has
    them): the invariants about hits and loads are not judged on nothing."""
    verdict = run_workload(make_reference_target(), LAYOUTS[layout], SEEDS[0], NUM_STEPS)
    assert verdict.violations == {}, verdict.violations
    assert verdict.hits > 0, f"{layout}: no prefix hit was served in {NUM_STEPS} steps"
    assert verdict.external_loads > 0 or not LAYOUTS[layout].external_loads, f"{layout}: no connector load"
    if LAYOUTS[layout].spec_tokens:
        assert verdict.draft_steps > 0 and verdict.rejected_drafts > 0, \
            f"{layout}: {verdict.draft_steps} decode steps with drafts, {verdict.rejected_drafts} drafts rejected"
