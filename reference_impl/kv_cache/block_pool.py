"""Block metadata, the free queue, the prefix-cache map and `BlockPool` (vLLM 0.33 `v1/core` semantics).

Hot paths (get_new_blocks, free_blocks, touch) link and unlink the intrusive free list inline instead of
calling the queue's methods per block: this module is what the throughput benchmarks measure.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from reference_impl.kv_cache.kv_cache_utils import BlockHashListWithBlockSize, FreeKVCacheBlockQueue, KVCacheBlock

__all__ = ["KVCacheBlock", "FreeKVCacheBlockQueue", "BlockHashToBlockMap", "BlockPool"]

logger = logging.getLogger(__name__)


class BlockHashToBlockMap:
    """Prefix-cache map: key -> block, or key -> {block_id: block} when several blocks share a key."""

    __slots__ = ("_cache",)

    def __init__(self):
        self._cache: dict[bytes, KVCacheBlock | dict[int, KVCacheBlock]] = {}

    def get_one_block(self, key: bytes) -> KVCacheBlock | None:
        """The block for `key` (the first inserted one when there are several)."""
        entry = self._cache.get(key)
        if entry is None or type(entry) is KVCacheBlock:
            return entry
        return next(iter(entry.values()))

    def insert(self, key: bytes, block: KVCacheBlock) -> None:
        """Add `block` under `key` (promotes the entry to a dict on the second distinct block)."""
        cache = self._cache
        entry = cache.get(key)
        if entry is None:
            cache[key] = block
        elif type(entry) is KVCacheBlock:
            if entry is not block:
                cache[key] = {entry.block_id: entry, block.block_id: block}
        else:
            entry[block.block_id] = block

    def pop(self, key: bytes, block_id: int) -> KVCacheBlock | None:
        """Remove only `block_id` under `key`; a wrong id leaves the entry untouched and returns None."""
        cache = self._cache
        entry = cache.get(key)
        if entry is None:
            return None
        if type(entry) is KVCacheBlock:
            if entry.block_id != block_id:
                return None
            del cache[key]
            return entry
        block = entry.pop(block_id, None)
        if not entry:
            del cache[key]
        elif len(entry) == 1:
            cache[key] = next(iter(entry.values()))
        return block

    def items(self) -> list[tuple[bytes, list[KVCacheBlock]]]:
        """(key, blocks) pairs, blocks in insertion order (for tests)."""
        return [(k, [v] if type(v) is KVCacheBlock else list(v.values())) for k, v in self._cache.items()]

    def __len__(self) -> int:
        return len(self._cache)


def _splice(before: KVCacheBlock, first: KVCacheBlock, last: KVCacheBlock, after: KVCacheBlock) -> None:
    """Link the chain first..last between the adjacent queue nodes `before` and `after`."""
    before.next_free_block = first
    first.prev_free_block = before
    last.next_free_block = after
    after.prev_free_block = last


class BlockPool:
    """The single pool of `num_gpu_blocks` block ids shared by every KV cache group.

    Block 0 is the null block. With `enable_caching`, full blocks are registered under their
    hash + group id and stay cached while free until the pool hands them out again (lazy eviction).
    """

    def __init__(self, num_gpu_blocks: int, enable_caching: bool, hash_block_size: int = 16,
                 enable_kv_cache_events: bool = False, metrics_collector=None, num_hash_lookahead_tokens: int = 0):
        if isinstance(num_gpu_blocks, bool) or not isinstance(num_gpu_blocks, int) or num_gpu_blocks < 1:
            raise ValueError(
                f"BlockPool.num_gpu_blocks must be an integer >= 1 (block 0 is the null block), got {num_gpu_blocks!r}"
            )
        if isinstance(hash_block_size, bool) or not isinstance(hash_block_size, int) or hash_block_size <= 0:
            raise ValueError(f"BlockPool.hash_block_size must be a positive integer, got {hash_block_size!r}")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self.hash_block_size = hash_block_size
        self.enable_kv_cache_events = enable_kv_cache_events
        self.blocks = [KVCacheBlock(i, pool=self) for i in range(num_gpu_blocks)]
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks)
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        self.kv_event_queue: list[tuple] = []

    # ----------------------------------------------------------------------------------------------- lookup
    def get_cached_block(self, block_hash: bytes, kv_cache_group_ids: Sequence[int]) -> list[KVCacheBlock] | None:
        """One cached block per group id for `block_hash`, or None if any group misses."""
        cache = self.cached_block_hash_to_block._cache
        out = []
        for gid in kv_cache_group_ids:
            entry = cache.get(block_hash + gid.to_bytes(4, "big"))
            if entry is None:
                return None
            out.append(entry if type(entry) is KVCacheBlock else next(iter(entry.values())))
        return out

    def is_block_writable(self, block: KVCacheBlock) -> bool:
        """Whether the block's sole owner may overwrite it: not the null block, one reference, no hash."""
        return not block.is_null and block.ref_cnt == 1 and block.block_hash is None

    # ---------------------------------------------------------------------------------------------- caching
    def cache_full_blocks(self, request, blocks: Sequence[KVCacheBlock], num_cached_blocks: int,
                          num_full_blocks: int, block_size: int, kv_cache_group_id: int,
                          block_mask: Sequence[bool] | None = None) -> None:
        """Register blocks[num_cached_blocks:num_full_blocks] (non-null, unmasked) under the request's hashes.

        `block_mask` covers only that range (entry 0 is block `num_cached_blocks`)."""
        if num_cached_blocks >= num_full_blocks:
            return
        hashes = request.block_hashes
        k = block_size // self.hash_block_size
        if k * self.hash_block_size != block_size:
            raise ValueError(f"block_size ({block_size}) must be a multiple of hash_block_size ({self.hash_block_size})")
        if len(hashes) < num_full_blocks * k:
            raise ValueError(
                f"request {request.request_id} has {len(hashes)} block hashes, fewer than the "
                f"{num_full_blocks} full blocks of size {block_size} to cache"
            )
        suffix = kv_cache_group_id.to_bytes(4, "big")
        cache = self.cached_block_hash_to_block._cache
        stored = [] if self.enable_kv_cache_events else None
        for i in range(num_cached_blocks, num_full_blocks):
            block = blocks[i]
            if block.is_null or (block_mask is not None and not block_mask[i - num_cached_blocks]):
                continue
            if block._block_hash is not None:
                raise AssertionError("The block already has a hash. This should not happen.")
            key = hashes[(i + 1) * k - 1] + suffix
            block._block_hash = key
            block._block_hash_num_tokens = (i + 1) * block_size
            entry = cache.get(key)
            if entry is None:
                cache[key] = block
            elif type(entry) is KVCacheBlock:
                cache[key] = {entry.block_id: entry, block.block_id: block}
            else:
                entry[block.block_id] = block
            if stored is not None:
                stored.append(block.block_id)
        if stored:
            self.kv_event_queue.append(("BlockStored", kv_cache_group_id, stored))

    def _evict_cached(self, block: KVCacheBlock) -> None:
        key = block._block_hash
        block._block_hash = None
        block._block_hash_num_tokens = None
        cache = self.cached_block_hash_to_block._cache
        entry = cache.get(key)
        if entry is block:
            del cache[key]
        elif entry is not None and type(entry) is not KVCacheBlock:
            entry.pop(block.block_id, None)
            if not entry:
                del cache[key]
            elif len(entry) == 1:
                cache[key] = next(iter(entry.values()))
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(("BlockRemoved", key))

    def _maybe_evict_cached_block(self, block: KVCacheBlock) -> bool:
        """Drop the block's prefix-cache entry if it has one; whether it had."""
        if block._block_hash is None:
            return False
        self._evict_cached(block)
        return True

    # --------------------------------------------------------------------------------------- alloc / free
    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop `num_blocks` from the head of the free queue (evicting cached ones), ref_cnt = 1 each."""
        queue = self.free_block_queue
        if num_blocks > queue.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        if num_blocks <= 0:
            if num_blocks < 0:
                raise ValueError(f"num_blocks must be non-negative, got {num_blocks}")
            return []
        head = queue.fake_free_list_head
        cur = head.next_free_block
        if num_blocks == 1:  # the common decode case, without a loop
            nxt = cur.next_free_block
            head.next_free_block = nxt
            nxt.prev_free_block = head
            cur.prev_free_block = cur.next_free_block = None
            if cur._block_hash is not None and self.enable_caching:
                self._evict_cached(cur)
            cur.ref_cnt = 1
            queue.num_free_blocks -= 1
            return [cur]
        out = []
        append = out.append
        if self.enable_caching:
            evict = self._evict_cached
            for _ in range(num_blocks):
                append(cur)
                nxt = cur.next_free_block
                cur.prev_free_block = cur.next_free_block = None
                if cur._block_hash is not None:
                    evict(cur)
                cur.ref_cnt = 1
                cur = nxt
        else:
            for _ in range(num_blocks):
                append(cur)
                nxt = cur.next_free_block
                cur.prev_free_block = cur.next_free_block = None
                cur.ref_cnt = 1
                cur = nxt
        head.next_free_block = cur
        cur.prev_free_block = head
        queue.num_free_blocks -= num_blocks
        return out

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on each non-null block (prefix hit), unlinking free ones from the queue."""
        queue = self.free_block_queue
        for block in blocks:
            if block.is_null:
                continue
            if block.ref_cnt == 0:
                prev = block.prev_free_block
                nxt = block.next_free_block
                prev.next_free_block = nxt
                nxt.prev_free_block = prev
                block.prev_free_block = block.next_free_block = None
                queue.num_free_blocks -= 1
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference per non-null block; those reaching 0 rejoin the queue.

        Unhashed (or caching off) ones are prepended in the given order (reused first); hashed ones are
        appended in the given order (evicted last). Callers pass a request's blocks tail first.
        """
        if type(ordered_blocks) is list and len(ordered_blocks) == 1:
            block = ordered_blocks[0]
            if block.is_null:
                return
            rc = block.ref_cnt - 1
            if rc < 0:
                raise AssertionError(f"ref_cnt of block {block.block_id} would become negative")
            block.ref_cnt = rc
            if rc:
                return
            queue = self.free_block_queue
            if self.enable_caching and block._block_hash is not None:
                tail = queue.fake_free_list_tail
                prev = tail.prev_free_block
                prev.next_free_block = block
                block.prev_free_block = prev
                block.next_free_block = tail
                tail.prev_free_block = block
            else:
                head = queue.fake_free_list_head
                nxt = head.next_free_block
                nxt.prev_free_block = block
                block.next_free_block = nxt
                head.next_free_block = block
                block.prev_free_block = head
            queue.num_free_blocks += 1
            return
        # One pass: the blocks reaching 0 are chained as they come (head chain and tail chain, each in the
        # given order), then each chain is spliced into the queue once.
        head_first = head_last = tail_first = tail_last = None
        num_freed = 0
        caching = self.enable_caching
        for block in ordered_blocks:
            if block.is_null:
                continue
            rc = block.ref_cnt - 1
            if rc < 0:
                raise AssertionError(f"ref_cnt of block {block.block_id} would become negative")
            block.ref_cnt = rc
            if rc == 0:
                num_freed += 1
                if caching and block._block_hash is not None:
                    if tail_last is None:
                        tail_first = block
                    else:
                        tail_last.next_free_block = block
                        block.prev_free_block = tail_last
                    tail_last = block
                else:
                    if head_last is None:
                        head_first = block
                    else:
                        head_last.next_free_block = block
                        block.prev_free_block = head_last
                    head_last = block
        if not num_freed:
            return
        queue = self.free_block_queue
        if head_first is not None:
            head = queue.fake_free_list_head
            _splice(head, head_first, head_last, head.next_free_block)
        if tail_first is not None:
            tail = queue.fake_free_list_tail
            _splice(tail.prev_free_block, tail_first, tail_last, tail)
        queue.num_free_blocks += num_freed

    def evict_blocks(self, block_ids: Iterable[int]) -> None:
        """Drop the prefix-cache entries of these blocks (ref counts unchanged)."""
        blocks = self.blocks
        for block_id in block_ids:
            if not isinstance(block_id, int) or not 0 <= block_id < self.num_gpu_blocks:
                raise ValueError(f"block_ids: {block_id!r} is not a block id of this pool (0..{self.num_gpu_blocks - 1})")
            block = blocks[block_id]
            if block._block_hash is not None:
                self._evict_cached(block)

    def reset_prefix_cache(self) -> bool:
        """Clear the prefix cache; refused (False) unless every block but the null block is free."""
        num_used = self.num_gpu_blocks - self.free_block_queue.num_free_blocks
        if num_used != 1:
            logger.warning("Failed to reset prefix cache because some blocks (%d) are not freed yet", num_used - 1)
            return False
        self.cached_block_hash_to_block = BlockHashToBlockMap()
        for block in self.blocks:
            block._block_hash = None
            block._block_hash_num_tokens = None
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(("AllBlocksCleared",))
        return True

    # ---------------------------------------------------------------------------------------------- stats
    def get_num_free_blocks(self) -> int:
        """Blocks in the free queue (cached-but-free ones included)."""
        return self.free_block_queue.num_free_blocks

    def get_usage(self) -> float:
        """Fraction of usable (non-null) blocks in use."""
        total = self.num_gpu_blocks - 1
        if not total:
            return 0.0
        return 1.0 - self.get_num_free_blocks() / total

    def take_events(self) -> list[tuple]:
        """Drain the KV cache events emitted since the last call."""
        events, self.kv_event_queue = self.kv_event_queue, []
        return events

    def hashes_at(self, request, block_size: int) -> Sequence[bytes]:
        """The request's hash list viewed at `block_size`."""
        if block_size == self.hash_block_size:
            return request.block_hashes
        return BlockHashListWithBlockSize(request.block_hashes, self.hash_block_size, block_size)
