"""Spec section 2.7: KV cache events (`BlockStored`, `BlockRemoved`, `AllBlocksCleared`) as vLLM 0.33 emits them.

Expected hashes come from an independent oracle (SHA-256 of the pickled (parent, tokens, extra keys) chain
from NONE_HASH); expected block ids, event order and fields were worked out by hand from vLLM 0.33's rules
(written next to each scenario). A consumer (a KV-aware router) rebuilds the cache's contents from these
events alone, so every field it reads is checked.
"""

from collections import Counter

import pytest
from hypothesis import settings
from hypothesis.stateful import invariant

from harness.report.passes import capped_examples
from harness.targets.allocator.target import GroupDesc
from suites.allocator.helpers import prefill
from suites.allocator.test_data_structures import oracle_none_hash, oracle_sha256
from suites.allocator.test_state_machine import CONFIGS, make_machine

SECTION = "2.7"
pytestmark = pytest.mark.needs('kv_event_group_idx', 'default_none_hash_seed', 'unhashed_lifo')

FULL4 = [GroupDesc("full", 4)]


INT_HASHES = "VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES"


@pytest.fixture(autouse=True)
def _default_int_block_hashes(monkeypatch):
    # vLLM's default: events publish each hash as its low 64 bits (an int); one scenario switches to bytes.
    monkeypatch.delenv(INT_HASHES, raising=False)


def oracle_hashes(tokens, block_size, extra_per_block=None) -> list[bytes]:
    """Block hashes of `tokens` chained from NONE_HASH (extra keys per block, default None)."""
    out = []
    parent = oracle_none_hash()
    for i in range(len(tokens) // block_size):
        extra = extra_per_block[i] if extra_per_block else None
        parent = oracle_sha256((parent, tuple(tokens[i * block_size:(i + 1) * block_size]), extra))
        out.append(parent)
    return out


def published(block_hash: bytes) -> int:
    """A hash as events publish it by default: its low 64 bits, big-endian."""
    return int.from_bytes(block_hash, "big") & (2**64 - 1)


def oracle_chain(tokens, block_size, extra_per_block=None) -> list[int]:
    """The published form of `oracle_hashes`."""
    return [published(h) for h in oracle_hashes(tokens, block_size, extra_per_block)]


def kind(event) -> str:
    """The event's class name (the target's own class, vLLM's or the reference's)."""
    return type(event).__name__


def chunked_prompt(target):
    """Full bs 4, pool of 8, events on; the 12-token prompt 1..12 prefilled in two chunks of 6.
    Returns (manager, request)."""
    m = target.make_manager(FULL4, 8, 100, enable_kv_cache_events=True)
    req = target.make_request("a", list(range(1, 13)), 4)
    prefill(m, req, chunk=6, use_hits=False)
    return m, req


# -------------------------------------------------------------------------------------------- stored
# The chunked prompt: the first chunk fills block 0 (one hash, no parent); the second fills blocks 1 and 2
# (two hashes, parent = block 0's hash, tokens 5..12).
@pytest.mark.needs('kv_event_lookahead')
def test_block_stored_per_chunk_chains_from_its_parent(target):
    m, _ = chunked_prompt(target)
    h = oracle_chain(list(range(1, 13)), 4)
    events = m.take_events()
    assert [kind(e) for e in events] == ["BlockStored", "BlockStored"], "one BlockStored per caching call"
    first, second = events
    assert first.block_hashes == [h[0]], "first chunk: block 0's hash only"
    assert first.parent_block_hash is None, "a run starting at token 0 has no parent"
    assert first.token_ids == [1, 2, 3, 4], "token ids of exactly the stored blocks"
    assert second.block_hashes == [h[1], h[2]], "second chunk: blocks 1 and 2, in order"
    assert second.parent_block_hash == h[0], "parent = hash of the block before the run"
    assert second.token_ids == list(range(5, 13))
    for e in events:
        assert e.block_size == 4 and e.group_idx == 0, "block size and group of the stored run"
        assert e.medium == "GPU", "the device pool reports medium 'GPU'"
        assert e.lora_id is None and e.lora_name is None, "no LoRA adapter"
        assert e.extra_keys == [None] * len(e.block_hashes), "one (empty) extra-key entry per hash"
        assert e.kv_cache_spec_kind == "full_attention", "the manager tags the group's spec kind"
        assert e.kv_cache_spec_sliding_window is None, "no window for full attention"
        assert e.lookahead_token_ids is None, "lookahead hashing off"
    assert m.take_events() == [], "take_events drains the queue"


@pytest.mark.needs('tagged_extra_keys')
def test_block_stored_carries_lora_and_salt_extra_keys(target):
    """Extra keys are published untagged, one entry per block: the LoRA name on every block, the cache salt
    on the first only; the hashes themselves chain the tagged keys."""
    m = target.make_manager(FULL4, 8, 100, enable_kv_cache_events=True)
    tokens = list(range(1, 9))
    lora = ("ad", 7, "/p")
    h = oracle_chain(tokens, 4, [(("lora", "ad", "/p"), ("cache_salt", "s")), (("lora", "ad", "/p"),)])
    req = target.make_request("l", tokens, 4, lora=lora, cache_salt="s")
    prefill(m, req, use_hits=False)
    (event,) = m.take_events()
    assert event.block_hashes == h, "LoRA and salt enter the hash chain as tagged extra keys"
    assert event.extra_keys == [("ad", "s"), ("ad",)], "published untagged: name (+ salt on block 0)"
    assert event.lora_id == 7 and event.lora_name == "ad", "the adapter's id and name"


# Full bs 4 + SWA bs 4 (window 8), pool of 16, a 9-token prompt: both groups store blocks 0 and 1 (the
# SWA hit at the prompt's replay point 8 needs cdiv(8 - 1, 4) = 2 blocks), group 0 first.
def test_hybrid_groups_each_store_with_their_spec(target):
    m = target.make_manager([GroupDesc("full", 4), GroupDesc("sliding_window", 4, sliding_window=8)], 16, 100,
                            enable_kv_cache_events=True)
    tokens = list(range(1, 10))
    h = oracle_chain(tokens, 4)
    prefill(m, target.make_request("h", tokens, 4), use_hits=False)
    events = m.take_events()
    got = [(e.group_idx, e.block_hashes, e.kv_cache_spec_kind, e.kv_cache_spec_sliding_window) for e in events]
    assert got == [(0, h[:2], "full_attention", None), (1, h[:2], "sliding_window", 8)], \
        "one BlockStored per group, tagged with that group's spec kind and window"


# -------------------------------------------------------------------------------------------- removed
# After the chunked prompt above is freed (tail first, so the queue is 4 5 6 7 | 3 2 1), a 28-token prompt
# takes all 7 blocks: cached blocks 3, 2, 1 are evicted in queue order, one BlockRemoved per key, before
# the new run is stored.
def test_eviction_emits_block_removed_per_key_in_queue_order(target):
    m, first = chunked_prompt(target)
    h = oracle_chain(list(range(1, 13)), 4)
    m.free(first)
    m.take_events()
    other = list(range(100, 128))
    prefill(m, target.make_request("b", other, 4), use_hits=False)
    events = m.take_events()
    assert [kind(e) for e in events] == ["BlockRemoved"] * 3 + ["BlockStored"], \
        "three evictions, then the new run"
    assert [e.block_hashes for e in events[:3]] == [[h[2]], [h[1]], [h[0]]], \
        "evicted in free-queue order (the freed prompt's tail first), one key per event"
    assert all(e.group_idx == 0 and e.medium == "GPU" for e in events[:3]), "removed keys name their group"
    assert events[3].block_hashes == oracle_chain(other, 4), "the new prompt's 7 blocks"


def test_evict_blocks_reports_only_cached_blocks(target):
    """`evict_blocks` (a connector reporting lost blocks) emits a BlockRemoved per cached block only."""
    m = target.make_manager(FULL4, 8, 100, enable_kv_cache_events=True)
    tokens = list(range(1, 11))
    h = oracle_chain(tokens, 4)
    req = target.make_request("e", tokens, 4)
    prefill(m, req, use_hits=False)  # blocks 1, 2 cached; block 3 holds the partial tail
    m.take_events()
    m.evict_blocks({2, 3})
    events = m.take_events()
    assert [(kind(e), e.block_hashes) for e in events] == [("BlockRemoved", [h[1]])], \
        "block 2's key is removed; block 3 had none"


# -------------------------------------------------------------------------------------------- cleared
def test_reset_prefix_cache_emits_all_blocks_cleared(target):
    m = target.make_manager(FULL4, 8, 100, enable_kv_cache_events=True)
    req = target.make_request("r", list(range(1, 9)), 4)
    prefill(m, req, use_hits=False)
    m.take_events()
    assert m.reset_prefix_cache() is False, "refused while a request holds blocks"
    assert m.take_events() == [], "a refused reset emits nothing"
    m.free(req)
    m.take_events()
    assert m.reset_prefix_cache() is True
    assert [kind(e) for e in m.take_events()] == ["AllBlocksCleared"], "one AllBlocksCleared, no per-key removals"


def test_bytes_hashes_when_int_hashes_switched_off(target, monkeypatch):
    """With VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 events carry the full hash bytes."""
    monkeypatch.setenv(INT_HASHES, "0")
    m, _ = chunked_prompt(target)
    h = oracle_hashes(list(range(1, 13)), 4)
    first, second = m.take_events()
    assert first.block_hashes == [h[0]] and second.block_hashes == h[1:], "full 32-byte hashes"
    assert second.parent_block_hash == h[0], "the parent too"


def test_events_off_queue_nothing(target):
    m = target.make_manager(FULL4, 8, 100)
    req = target.make_request("o", list(range(1, 13)), 4)
    prefill(m, req, use_hits=False)
    m.free(req)
    m.reset_prefix_cache()
    assert m.take_events() == [], "with events disabled take_events is always empty"


# ------------------------------------------------------------------------------------ reused (hits)
# emit_cached_block_events reports a request's first N blocks (its prefix-cache hit) without touching the
# pool: one BlockStored from token 0 (no parent) in the given group.
@pytest.mark.needs('emit_cached_block_events')
def test_emit_cached_block_events_reports_hit_without_state_change(target):
    pool = target.make_block_pool(8, True, 4, enable_kv_cache_events=True)
    tokens = list(range(1, 17))
    h = oracle_chain(tokens, 4)
    req = target.make_request("c", tokens, 4)
    free_before = pool.get_num_free_blocks()
    pool.emit_cached_block_events(req, 0, 4, 1)
    assert pool.take_events() == [], "no hit blocks: no event"
    pool.emit_cached_block_events(req, 3, 4, 1)
    (event,) = pool.take_events()
    assert kind(event) == "BlockStored"
    assert event.block_hashes == h[:3] and event.parent_block_hash is None, "blocks 0..2 from the start"
    assert event.token_ids == list(range(1, 13)) and event.group_idx == 1 and event.block_size == 4
    assert pool.get_num_free_blocks() == free_before, "no block allocated"
    assert target.cache_entries(pool) == {}, "nothing inserted into the prefix-cache map"


# ------------------------------------------------------------------------------------------- replay
class _EventsOn:
    """The target, with KV cache events on in every manager it makes."""

    def __init__(self, target):
        self._target = target

    def __getattr__(self, name):
        return getattr(self._target, name)

    def make_manager(self, *args, **kwargs):
        return self._target.make_manager(*args, enable_kv_cache_events=True, **kwargs)


def replay(events, counts: Counter) -> None:
    """What a KV-aware router does: fold events into {(published hash, group): blocks under that key}."""
    for event in events:
        name = kind(event)
        if name == "AllBlocksCleared":
            counts.clear()
            continue
        step = 1 if name == "BlockStored" else -1
        for h in event.block_hashes:
            key = (h, event.group_idx)
            counts[key] += step
            assert counts[key] >= 0, f"BlockRemoved for {key} without a matching BlockStored"
            if not counts[key]:
                del counts[key]


# The state machine's layouts plus R-SWA, whose decode gap is freed (and its blocks reused) mid-request.
REPLAY_CONFIGS = {**CONFIGS, "full+rswa": [GroupDesc("full", 4), GroupDesc("rswa", 4, rswa_window=8)]}


@pytest.mark.parametrize("config", list(REPLAY_CONFIGS))
def test_events_replay_to_the_prefix_cache_map(target, config):
    """Random admit / decode / free / evict / reset sequences (the allocator state machine, whose own
    invariants run too): after every step, replaying all events so far gives exactly the prefix-cache map,
    key by key, block count by count."""
    machine = make_machine(_EventsOn(target), REPLAY_CONFIGS[config])

    class ReplayMachine(machine):
        @invariant()
        def events_rebuild_the_map(self):
            if not hasattr(self, "m"):
                return
            counts = self.__dict__.setdefault("replayed", Counter())
            replay(self.m.take_events(), counts)
            expected = Counter({(published(key[:-4]), int.from_bytes(key[-4:], "big")): len(bids)
                                for key, bids in target.cache_entries(self.pool).items()})
            assert counts == expected, "events replayed by a consumer must equal the prefix-cache map"

    ReplayMachine.TestCase.settings = settings(max_examples=capped_examples(60), stateful_step_count=40, derandomize=True,
                                               deadline=None, database=None)
    ReplayMachine.TestCase().runTest()
