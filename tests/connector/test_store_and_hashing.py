"""Unit tests of the LMCache-like connector's backend and keys: LRU with a byte budget, pins, the disk tier
surviving a restart, and prefix-chained chunk hashes."""

from __future__ import annotations

import torch

from reference_impl.connector.hashing import chunk_hashes, object_key
from reference_impl.connector.store import ChunkStore, DiskTier, drop_shared_store, shared_store


def _obj(value: int) -> torch.Tensor:
    return torch.full((100,), value, dtype=torch.uint8)  # 100 bytes


def test_lru_eviction_respects_budget_and_recency():
    store = ChunkStore(max_bytes=300)
    for key in "abc":
        assert store.put(key, _obj(1))
    store.get("a")  # a becomes most recent: b is the least recently used
    assert store.put("d", _obj(2))
    assert store.keys() == ["c", "a", "d"]
    assert store.used_bytes == 300


def test_pins_block_eviction_until_unpinned():
    store = ChunkStore(max_bytes=200)
    store.put("a", _obj(1))
    store.put("b", _obj(1))
    store.pin("req-1", ["a", "b"])
    assert not store.put("c", _obj(1)), "pinned objects must not be evicted"
    store.pin("req-1", ["a"])  # re-pinning under one owner does not stack
    store.unpin("req-1")
    assert store.num_pins == 0
    assert store.put("c", _obj(1))


def test_disk_tier_survives_a_restart(tmp_path):
    name = "restart-test"
    first = shared_store(name, 1000, str(tmp_path), 10_000)
    first.put("k", _obj(7))
    drop_shared_store(name)  # the process "restarts": only the disk tier remains
    second = shared_store(name, 1000, str(tmp_path), 10_000)
    assert second is not first and second.contains("k")
    assert torch.equal(second.get("k"), _obj(7))
    drop_shared_store(name)


def test_disk_tier_evicts_oldest_files(tmp_path):
    disk = DiskTier(str(tmp_path), max_bytes=2500)
    for key in ("a", "b", "c"):
        disk.put(key, _obj(1))
    assert not disk.contains("a") and disk.contains("c")
    assert not list(tmp_path.glob("*.tmp")), "no half-written files are left"


def test_processes_sharing_a_disk_folder_see_each_others_writes_and_evictions(tmp_path):
    """Two tiers on one folder (two processes, e.g. pytest-xdist workers): an object one writes after the other read
    its index is found; one the other evicted is a miss, never an error."""
    reader, writer = DiskTier(str(tmp_path), max_bytes=10_000), DiskTier(str(tmp_path), max_bytes=10_000)
    writer.put("late", _obj(3))
    assert reader.contains("late") and torch.equal(reader.get("late"), _obj(3))
    writer.remove("late")
    assert not reader.contains("late") and reader.get("late") is None
    writer.put("gone", _obj(4))
    assert reader.contains("gone")
    writer.remove("gone")
    assert reader.get("gone") is None
    reader.remove("gone")  # already evicted elsewhere: nothing to do
    reader.clear()


def test_chunk_hashes_are_prefix_chained_and_salted():
    tokens = list(range(1000))
    hashes = chunk_hashes(tokens, 256)
    assert len(hashes) == 3, "a trailing partial chunk has no hash"
    other = chunk_hashes(tokens[:512] + [5] * 488, 256)
    assert hashes[:2] == other[:2] and hashes[2] != other[2]
    salted = chunk_hashes(tokens, 256, cache_salt="s")
    assert all(a != b for a, b in zip(hashes, salted)), "the salt must reach every chunk through the chain"
    lora = chunk_hashes(tokens, 256, lora_name="x")
    assert all(a != b for a, b in zip(hashes, lora))
    # Reviewed golden value: SHA-256 chain over int64 little-endian tokens (stable across processes).
    assert chunk_hashes(list(range(4)), 4)[0].hex()[:16] == _golden_first_hash()


def _golden_first_hash() -> str:
    import hashlib
    from array import array

    parent = hashlib.sha256(b"kvconform-lmcache-like-none-hash").digest()
    return hashlib.sha256(parent + array("q", range(4)).tobytes()).hexdigest()[:16]


def test_object_keys_separate_rank_and_group():
    h = b"\x01" * 32
    keys = {object_key("m", 2, r, g, h) for r in (0, 1) for g in (0, 1)}
    assert len(keys) == 4
    layouts = {object_key("m", 1, 0, 0, h, "torch.float16"), object_key("m", 1, 0, 0, h, "torch.bfloat16"),
               object_key("m", 2, 0, 0, h, "torch.float16"), object_key("n", 1, 0, 0, h, "torch.float16")}
    assert len(layouts) == 4, "model name, dtype and TP size each separate objects of one shared store"
