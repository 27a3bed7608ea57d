"""Block metadata, the free queue, the prefix-cache map and `BlockPool` (vLLM 0.33 `v1/core` semantics).

Hot paths (get_new_blocks, free_blocks, touch) work on the free queue inline instead of calling its methods
per block: blocks freed to the head go on the queue's `front` stack and are handed out from there by slicing
(no block there carries a prefix-cache key, so none is evicted on the way out), the rest of the intrusive free
list is linked and unlinked in place. This module is what the throughput benchmarks measure.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from itertools import islice

from reference_impl.kv_cache.kv_cache_utils import (
    BlockHashListWithBlockSize,
    FreeKVCacheBlockQueue,
    KVCacheBlock,
    gc_untrack as _gc_untrack,
    generate_block_hash_extra_keys,
    make_block_hash_with_group_id,
    maybe_convert_block_hash,
    to_event_extra_keys,
)
from reference_impl.kv_cache.kv_events import MEDIUM_GPU, event_classes
from reference_impl.kv_cache.release import PREFIX_CACHE_HOLDS_BLOCK_IDS, follows

__all__ = ["KVCacheBlock", "FreeKVCacheBlockQueue", "BlockHashToBlockMap", "BlockPool", "SharedEventQueueBlockPool"]

logger = logging.getLogger(__name__)


class BlockHashToBlockMap:
    """Prefix-cache map from a key (block hash + group id) to the cached blocks, holding block ids (vLLM 0.34).

    `_cache` maps each key to one block id (the earliest inserted of those still cached); `_dup_ids` keeps,
    for the keys that several blocks share, all their ids in insertion order. A dict of bytes and ints holds
    no reference the cyclic GC has to follow, so however many blocks are cached, a collection never walks
    them. Ids resolve through `blocks` (the pool's block list); built without it (0.33's signature), the map
    remembers each block it is given.

    Release shapes (`era`, default the allocator's, `reference_impl.kv_cache.release`): from 0.34 a key several
    blocks shared drops out of `_dup_ids` when one block is left; under 0.33 it stays there, and `_cache` reads as
    0.33's map did (a block, or `{block_id: block}` once a second block shared the key) through a live view
    (`_BlocksView`).
    """

    __slots__ = ("_ids", "_dup_ids", "_blocks", "_keep_dups", "_cache")

    def __init__(self, blocks: Sequence[KVCacheBlock] | None = None, era: str | None = None):
        # The one representation every path reads and writes; the hot paths use it directly.
        self._ids: dict[bytes, int] = _gc_untrack({})
        self._dup_ids: dict[bytes, dict[int, None]] = {}
        self._blocks: Sequence[KVCacheBlock] | dict[int, KVCacheBlock] = {} if blocks is None else blocks
        legacy = not follows(PREFIX_CACHE_HOLDS_BLOCK_IDS, era)
        self._keep_dups = legacy
        self._cache = _BlocksView(self) if legacy else self._ids

    def _block(self, block_id: int) -> KVCacheBlock:
        return self._blocks[block_id]

    def _remember(self, block: KVCacheBlock) -> None:
        # Built without the pool's block list: keep the blocks this map was given.
        blocks = self._blocks
        if type(blocks) is dict:
            blocks[block.block_id] = block

    def get_one_block(self, key: bytes) -> KVCacheBlock | None:
        """The block for `key` (the earliest inserted one when there are several)."""
        block_id = self._ids.get(key)
        return None if block_id is None else self._blocks[block_id]

    def contain(self, key: bytes, block_id: int) -> bool:
        """Whether `key` maps (among others) to block `block_id`."""
        dup_ids = self._dup_ids.get(key)
        if dup_ids is not None:
            return block_id in dup_ids
        return self._ids.get(key) == block_id

    def insert(self, key: bytes, block: KVCacheBlock) -> None:
        """Add `block` under `key` (a second distinct block makes the key a shared one)."""
        self._remember(block)
        first = self._ids.setdefault(key, block.block_id)
        if first != block.block_id:
            self._dup_ids.setdefault(key, {first: None})[block.block_id] = None

    def pop(self, key: bytes, block_id: int) -> KVCacheBlock | None:
        """Remove only `block_id` under `key`; a wrong id leaves the entry untouched and returns None."""
        dup_ids = self._dup_ids.get(key)
        if dup_ids is None:
            if self._ids.get(key) != block_id:
                return None
            del self._ids[key]
        else:
            if dup_ids.pop(block_id, False) is False:
                return None
            if dup_ids:
                self._ids[key] = next(iter(dup_ids))
                if len(dup_ids) == 1 and not self._keep_dups:
                    del self._dup_ids[key]
            else:
                del self._ids[key]
                del self._dup_ids[key]
        return self._blocks[block_id]

    def clear(self) -> None:
        """Drop every entry (in place: the map object stays the one the pool holds)."""
        self._ids.clear()
        self._dup_ids.clear()

    def items(self) -> list[tuple[bytes, list[KVCacheBlock]]]:
        """(key, blocks) pairs, blocks in insertion order (for tests)."""
        blocks, dups = self._blocks, self._dup_ids
        return [(k, [blocks[i] for i in dups[k]] if k in dups else [blocks[v]]) for k, v in self._ids.items()]

    def __len__(self) -> int:
        return len(self._ids)


class _BlocksView(MutableMapping):
    """vLLM 0.33's `_cache` read and written live over an id map: key -> block, or `{block_id: block}`
    for a key that several blocks have shared (0.33's tests read, pop, restore and clear it)."""

    __slots__ = ("_map",)

    def __init__(self, owner: BlockHashToBlockMap):
        self._map = owner

    def __getitem__(self, key):
        m = self._map
        block_id = m._ids[key]
        dups = m._dup_ids.get(key)
        if dups is None:
            return m._blocks[block_id]
        return {i: m._blocks[i] for i in dups}

    def __setitem__(self, key, value) -> None:
        m = self._map
        if key in m._ids:
            del self[key]
        blocks = list(value.values()) if isinstance(value, dict) else [value]
        for block in blocks:
            m._remember(block)
        m._ids[key] = blocks[0].block_id
        if isinstance(value, dict):
            m._dup_ids[key] = dict.fromkeys(b.block_id for b in blocks)

    def __delitem__(self, key) -> None:
        m = self._map
        del m._ids[key]
        m._dup_ids.pop(key, None)

    def __iter__(self):
        return iter(self._map._ids)

    def __len__(self) -> int:
        return len(self._map._ids)

    def clear(self) -> None:
        self._map.clear()

    def __copy__(self) -> dict:
        return dict(self.items())

    def __repr__(self) -> str:
        return repr(dict(self.items()))


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
                 enable_kv_cache_events: bool = False, metrics_collector=None, num_hash_lookahead_tokens: int = 0,
                 medium: str = MEDIUM_GPU):
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
        if not isinstance(num_hash_lookahead_tokens, int) or num_hash_lookahead_tokens < 0:
            raise ValueError(f"BlockPool.num_hash_lookahead_tokens must be a non-negative integer, "
                             f"got {num_hash_lookahead_tokens!r}")
        #: Tokens after each hash block that its hash also covers (MTP lookahead), so a prefix is only
        #: provable once that many tokens past it are known.
        self.num_hash_lookahead_tokens = int(num_hash_lookahead_tokens)
        self.medium = medium
        # Blocks name their pool through a weak reference (no block <-> pool cycle), so lists of blocks can
        # be hidden from the GC and a dropped pool is freed by refcounting alone.
        self._weak_self = weakref.ref(self)
        self.blocks = [KVCacheBlock(i, pool=self._weak_self) for i in range(num_gpu_blocks)]
        # Unlinked: a new pool hands its blocks out in id order straight from the queue's `front` stack.
        self.free_block_queue = FreeKVCacheBlockQueue(self.blocks, linked=False)
        self.cached_block_hash_to_block = BlockHashToBlockMap(self.blocks)
        # Extra keys a block is reachable under besides its primary `block_hash` (partial prefix entries
        # registered on a block that already had a key). Never non-empty for a block without a primary key.
        self.cached_block_hashes_by_block: dict[int, set[bytes]] = {}
        self.null_block = self.free_block_queue.popleft()
        self.null_block.is_null = True
        # Never pooled (free_blocks skips it through this) and never freed.
        self.null_block.pool = None
        # Scratch node free_blocks hangs the chain of blocks freed to the tail off before splicing it in.
        self._tail_chain = KVCacheBlock(-2)
        # Blocks released by `unpin_blocks` whose old contents someone still reads, with the callback
        # that tells the reader when the pool hands the block out again.
        self._reuse_watchers: dict[int, Callable[[KVCacheBlock], None]] = {}
        # BlockStored / BlockRemoved / AllBlocksCleared objects (vLLM's classes when vLLM is importable)
        self.kv_event_queue: list = []

    # ----------------------------------------------------------------------------------------------- lookup
    def get_cached_block(self, block_hash: bytes, kv_cache_group_ids: Sequence[int]) -> list[KVCacheBlock] | None:
        """One cached block per group id for `block_hash`, or None if any group misses."""
        ids = self.cached_block_hash_to_block._ids
        blocks = self.blocks
        out = []
        for gid in kv_cache_group_ids:
            block_id = ids.get(block_hash + gid.to_bytes(4, "big"))
            if block_id is None:
                return None
            out.append(blocks[block_id])
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
        cache_map = self.cached_block_hash_to_block
        ids = cache_map._ids
        stored = [] if self.enable_kv_cache_events else None
        for i in range(num_cached_blocks, num_full_blocks):
            block = blocks[i]
            if block.is_null or (block_mask is not None and not block_mask[i - num_cached_blocks]):
                continue
            if block.block_hash is not None:
                # Only a partial entry may be there already: the block has filled up since (promotion).
                held = block.block_hash_num_tokens
                if held is None or held >= (i + 1) * block_size:
                    raise AssertionError("The block already has a hash. This should not happen.")
                self._emit_block_removed_events(self._remove_cached_block_hashes(block))
            elif block.ref_cnt == 0 and block.prev_free_block is None:
                self.free_block_queue.link_front()  # a free block on `front` takes no key (see get_new_blocks)
            key = hashes[(i + 1) * k - 1] + suffix
            block.block_hash = key
            block.block_hash_num_tokens = (i + 1) * block_size
            block_id = block.block_id
            if ids.setdefault(key, block_id) != block_id:
                cache_map.insert(key, block)
            if stored is not None:
                stored.append(i)
        if stored is not None:
            parent = hashes[num_cached_blocks * k - 1] if num_cached_blocks else None
            self.kv_event_queue.append(self._block_stored_event(
                request, [hashes[(i + 1) * k - 1] for i in stored], parent, [i * block_size for i in stored],
                num_cached_blocks * block_size, num_full_blocks * block_size, block_size, kv_cache_group_id))

    # ------------------------------------------------------------------------------------------- events
    def _event_extra_keys(self, request, block_starts: Sequence[int], block_size: int) -> list:
        """Each block's hash extra keys; with lookahead hashing they cover the lookahead tokens too."""
        lookahead = self.num_hash_lookahead_tokens
        out = []
        mm_idx = 0
        for start in block_starts:
            if lookahead:
                # the window reaches into the next block, so its multimodal items are rescanned from 0
                keys, _ = generate_block_hash_extra_keys(request, start, start + block_size + lookahead, 0)
            else:
                keys, mm_idx = generate_block_hash_extra_keys(request, start, start + block_size, mm_idx)
            out.append(keys)
        return out

    def generate_event_extra_keys(self, request, start: int, end: int, start_mm_idx: int) -> tuple[tuple | None, int]:
        """Extra keys of the block [start, end) for an event, and the multimodal index to resume from; with
        lookahead hashing the window covers the lookahead tokens too (vLLM 0.34's public name)."""
        if self.num_hash_lookahead_tokens:
            keys, _ = generate_block_hash_extra_keys(request, start, end + self.num_hash_lookahead_tokens, 0)
            return keys, start_mm_idx
        return generate_block_hash_extra_keys(request, start, end, start_mm_idx)

    def get_lookahead_token_ids(self, request, block_end: int) -> list[int]:
        """The lookahead tokens a block ending at `block_end` is hashed with."""
        return list(request.all_token_ids[block_end:block_end + self.num_hash_lookahead_tokens])

    def _block_stored_event(self, request, block_hashes: Sequence[bytes], parent_block_hash: bytes | None,
                            block_starts: Sequence[int], start_token: int, end_token: int, block_size: int,
                            kv_cache_group_id: int):
        """A BlockStored for the run of blocks starting at `block_starts` (one per hash) within tokens
        [start_token, end_token): what a consumer needs to recompute each hash from its parent."""
        tokens = request.all_token_ids
        lookahead = self.num_hash_lookahead_tokens
        lora = getattr(request, "lora_request", None)
        return event_classes().BlockStored(
            block_hashes=[maybe_convert_block_hash(h) for h in block_hashes],
            parent_block_hash=None if parent_block_hash is None else maybe_convert_block_hash(parent_block_hash),
            token_ids=list(tokens[start_token:end_token]),
            block_size=block_size,
            lora_id=_lora_id(lora),
            medium=self.medium,
            lora_name=_lora_name(lora),
            extra_keys=to_event_extra_keys(self._event_extra_keys(request, block_starts, block_size)),
            group_idx=kv_cache_group_id,
            session_id=getattr(request, "session_id", None),
            lookahead_token_ids=[list(tokens[s + block_size:s + block_size + lookahead]) for s in block_starts]
            if lookahead else None,
        )

    def _emit_block_removed(self, key: bytes) -> None:
        """Queue a BlockRemoved for one prefix-cache key (hash + group id)."""
        self.kv_event_queue.append(event_classes().BlockRemoved(
            block_hashes=[maybe_convert_block_hash(key[:-4])], medium=self.medium,
            group_idx=int.from_bytes(key[-4:], "big")))

    def emit_cached_block_events(self, request, num_cached_blocks: int, block_size: int,
                                 kv_cache_group_id: int) -> None:
        """Report the request's first `num_cached_blocks` blocks (prefix-cache hits) as one BlockStored.

        Block state is untouched: the blocks are already cached; consumers that only see new blocks (a
        gateway) learn which prefixes this request reused. A hit starts at token 0, so the parent is None.
        """
        if not self.enable_kv_cache_events or num_cached_blocks <= 0:
            return
        hashes = self.hashes_at(request, block_size)
        starts = [i * block_size for i in range(num_cached_blocks)]
        self.kv_event_queue.append(self._block_stored_event(
            request, [hashes[i] for i in range(num_cached_blocks)], None, starts, 0,
            num_cached_blocks * block_size, block_size, kv_cache_group_id))

    # ------------------------------------------------------------------------------------------ eviction
    def _evict_cached(self, block: KVCacheBlock) -> None:
        if self.cached_block_hashes_by_block and block.block_id in self.cached_block_hashes_by_block:
            self._emit_block_removed_events(self._remove_cached_block_hashes(block))
            return
        key = block.block_hash
        block.block_hash = None
        block.block_hash_num_tokens = None
        cache_map = self.cached_block_hash_to_block
        if key in cache_map._dup_ids:
            cache_map.pop(key, block.block_id)
        elif cache_map._ids.get(key) == block.block_id:
            del cache_map._ids[key]
        if self.enable_kv_cache_events:
            self._emit_block_removed(key)

    def _maybe_evict_cached_block(self, block: KVCacheBlock) -> bool:
        """Drop the block's prefix-cache entry if it has one; whether it had."""
        if block.block_hash is None:
            return False
        self._evict_cached(block)
        return True

    # ------------------------------------------------------------------------------------ partial entries
    def cache_partial_block(self, request, block: KVCacheBlock, num_tokens: int, kv_cache_group_id: int,
                            block_size: int, replace_existing_hashes: bool = False) -> bytes | None:
        """Make `block` reachable from the hash boundary `num_tokens` that lies inside it (a partial prefix
        entry); the key (hash + group id), or None for the null block.

        The key is the request's fine-grained chain hash at `num_tokens` (a positive multiple of the hash
        block size). A block without a key takes it as its primary key; otherwise it is an extra key of the
        block. An entry for fewer tokens is replaced; with `replace_existing_hashes` (the block's content was
        rewritten) every key of the block is dropped first.
        """
        if block.is_null:
            return None
        hbs = self.hash_block_size
        assert block_size % hbs == 0, f"block_size ({block_size}) must be a multiple of hash_block_size ({hbs})"
        assert num_tokens > 0 and num_tokens % hbs == 0, \
            f"num_tokens ({num_tokens}) must be a positive multiple of hash_block_size ({hbs})"
        num_hash_blocks = num_tokens // hbs
        assert num_hash_blocks <= len(request.block_hashes), \
            f"request {request.request_id} has no block hash at token {num_tokens}"
        key = make_block_hash_with_group_id(request.block_hashes[num_hash_blocks - 1], kv_cache_group_id)
        already = block.block_hash == key or self.cached_block_hash_to_block.contain(key, block.block_id)
        if replace_existing_hashes:
            self._emit_block_removed_events(self._remove_cached_block_hashes(block))
            already = False
        elif not already and block.block_hash is not None and block.block_hash_num_tokens is not None \
                and block.block_hash_num_tokens < num_tokens:
            # The block's content has grown past its old boundary: that entry no longer describes it.
            self._emit_block_removed_events(self._remove_cached_block_hashes(block))
        self._insert_block_hash(key, block, num_tokens)
        if self.enable_kv_cache_events and not already:
            self._emit_partial_block_stored(request, block, num_tokens, kv_cache_group_id)
        return key

    def move_block_hashes(self, src_block: KVCacheBlock, dst_block: KVCacheBlock) -> None:
        """Re-point every prefix-cache key of `src_block` to `dst_block` (an unkeyed private copy), for an
        owner that keeps writing into `src_block`. The entries stay live, so no events are emitted."""
        assert dst_block.block_hash is None and dst_block.block_id not in self.cached_block_hashes_by_block, \
            f"block {dst_block.block_id} must not be cached before it receives moved keys"
        num_tokens = src_block.block_hash_num_tokens
        for key in self._remove_cached_block_hashes(src_block):
            self._insert_block_hash(key, dst_block, num_tokens)

    def _insert_block_hash(self, key: bytes, block: KVCacheBlock, num_tokens: int | None) -> None:
        """Register `key` -> `block`: as the primary key of an unkeyed block, else as an extra key."""
        if block.block_hash == key or self.cached_block_hash_to_block.contain(key, block.block_id):
            return
        if block.block_hash is None:
            if block.ref_cnt == 0 and block.prev_free_block is None and not block.is_null:
                self.free_block_queue.link_front()  # a free block on `front` takes no key (see get_new_blocks)
            block.block_hash = key
            block.block_hash_num_tokens = num_tokens
        else:
            self.cached_block_hashes_by_block.setdefault(block.block_id, set()).add(key)
        self.cached_block_hash_to_block.insert(key, block)

    def _remove_cached_block_hashes(self, block: KVCacheBlock) -> list[bytes]:
        """Drop every key of `block` (primary and extra) from the map; the keys that were removed."""
        keys = [] if block.block_hash is None else [block.block_hash]
        keys.extend(self.cached_block_hashes_by_block.pop(block.block_id, ()))
        removed = [key for key in keys if self.cached_block_hash_to_block.pop(key, block.block_id) is not None]
        block.block_hash = None
        block.block_hash_num_tokens = None
        return removed

    def _emit_block_removed_events(self, keys: Sequence[bytes]) -> None:
        if self.enable_kv_cache_events:
            for key in keys:
                self._emit_block_removed(key)

    def _emit_partial_block_stored(self, request, block: KVCacheBlock, num_tokens: int,
                                   kv_cache_group_id: int) -> None:
        # A partial entry's event covers only the last hash unit before `num_tokens`, chained to the hash
        # before it (vLLM's shape), so a consumer can recompute the key from its parent.
        hbs = self.hash_block_size
        num_hash_blocks = num_tokens // hbs
        parent = request.block_hashes[num_hash_blocks - 2] if num_hash_blocks > 1 else None
        start = num_tokens - hbs
        self.kv_event_queue.append(self._block_stored_event(
            request, [request.block_hashes[num_hash_blocks - 1]], parent, [start], start, num_tokens, hbs,
            kv_cache_group_id))

    # --------------------------------------------------------------------------------------- alloc / free
    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop `num_blocks` from the head of the free queue (evicting cached ones), ref_cnt = 1 each."""
        queue = self.free_block_queue
        front = queue.front
        if 0 < num_blocks <= len(front):
            # The head of the queue is the end of `front` (blocks freed to the head, a new pool's blocks):
            # a slice, no links.
            if num_blocks == 1:
                out = [front.pop()]
            else:
                out = front[:-num_blocks - 1:-1]
                del front[-num_blocks:]
            queue.num_free_blocks -= num_blocks
            # No block on `front` has a key, so none is evicted here: a free block is linked in before it takes
            # one (cache_full_blocks, _insert_block_hash), and keyed blocks freed to the head are linked there.
            for block in out:
                block.ref_cnt = 1
            if self._reuse_watchers:
                self._notify_reuse(out)
            return out
        if num_blocks > queue.num_free_blocks:
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        if num_blocks <= 0:
            if num_blocks < 0:
                raise ValueError(f"num_blocks must be non-negative, got {num_blocks}")
            return []
        if front:  # the request reaches past `front` into the linked list
            queue.link_front()
        # A handed-out block's prev link is cleared, its next link left stale (nothing reads it): blocks
        # then reach `front` only with no prev link, which is how `touch` and the queue's `remove` tell a
        # block on `front` from a linked one in O(1).
        head = queue._head
        cur = head.next_free_block
        if num_blocks == 1:  # the common decode case, without a loop
            nxt = cur.next_free_block
            head.next_free_block = nxt
            nxt.prev_free_block = head
            cur.prev_free_block = None
            if cur.block_hash is not None and self.enable_caching:
                self._evict_cached(cur)
            cur.ref_cnt = 1
            queue.num_free_blocks -= 1
            if self._reuse_watchers:
                self._notify_reuse([cur])
            return [cur]
        out = []
        append = out.append
        if self.enable_caching:
            evict = self._evict_cached
            cache_map = self.cached_block_hash_to_block
            ids = cache_map._ids
            dups = cache_map._dup_ids
            # Eviction inline when no block has extra keys and no event is queued (extra keys are only ever
            # removed while handing out, so the check holds for the whole call) and the key names one block (a
            # key several blocks share, in `dups`, is popped through the map).
            inline = not self.enable_kv_cache_events and not self.cached_block_hashes_by_block
            for _ in range(num_blocks):
                append(cur)
                key = cur.block_hash
                if key is not None:
                    if inline and (not dups or key not in dups):
                        if ids.get(key) == cur.block_id:
                            del ids[key]
                        cur.block_hash = cur.block_hash_num_tokens = None
                    else:
                        evict(cur)
                cur.ref_cnt = 1
                cur.prev_free_block = None
                cur = cur.next_free_block
        else:
            for _ in range(num_blocks):
                append(cur)
                cur.ref_cnt = 1
                cur.prev_free_block = None
                cur = cur.next_free_block
        head.next_free_block = cur
        cur.prev_free_block = head
        queue.num_free_blocks -= num_blocks
        if self._reuse_watchers:
            self._notify_reuse(out)
        return out

    def _notify_reuse(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Tell the readers of unpinned blocks that the pool has handed them out (their data is gone)."""
        watchers = self._reuse_watchers
        for block in blocks:
            watcher = watchers.pop(block.block_id, None)
            if watcher is not None:
                watcher(block)

    def unpin_blocks(self, blocks: Iterable[KVCacheBlock], on_reuse: Callable[[KVCacheBlock], None]) -> None:
        """Drop one reference per block while its contents stay readable until the pool reuses it.

        A block reaching ref_cnt 0 joins the tail of the free queue (evicted last, hashed or not) and counts
        as free; `on_reuse(block)` fires when `get_new_blocks` hands it out or the prefix cache is reset.
        """
        released = []
        for block in blocks:
            if block.is_null or block.ref_cnt <= 0:
                raise AssertionError(f"unpin_blocks needs a referenced non-null block, got block "
                                     f"{block.block_id} with ref_cnt {block.ref_cnt}")
            block.ref_cnt -= 1
            self._reuse_watchers[block.block_id] = on_reuse
            if block.ref_cnt == 0:
                released.append(block)
        self.free_block_queue.append_n(released)

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take a reference on each non-null block (prefix hit); free ones leave the queue, whose other
        blocks keep their order (vLLM's `touch`)."""
        queue = self.free_block_queue
        for block in blocks:
            if block.is_null:
                continue
            if block.ref_cnt == 0:
                prev = block.prev_free_block
                if prev is None:
                    # No prev link: the block is on `front` (never for a hit: no block there has a key);
                    # the queue takes it off without linking the rest.
                    queue.remove(block)
                else:
                    # The usual hit: a cached block freed to the tail, unlinked in place.
                    nxt = block.next_free_block
                    prev.next_free_block = nxt
                    nxt.prev_free_block = prev
                    block.prev_free_block = block.next_free_block = None
                    queue.num_free_blocks -= 1
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool = False) -> None:
        """Drop one reference per non-null block; those reaching 0 rejoin the queue.

        Unhashed (or caching off) ones are prepended in the given order (reused first); hashed ones are
        appended in the given order (evicted last), unless `evict_first` (their contents are held by
        another tier): then they are prepended too. Callers pass a request's blocks tail first.
        """
        if type(ordered_blocks) is not list or evict_first:
            self._free_in_one_pass(ordered_blocks, evict_first, [])
            return
        if len(ordered_blocks) == 1 and ordered_blocks[0].pool is self._weak_self:
            # A single block (a window's block leaving it, a decode's last block), without a loop.
            block = ordered_blocks[0]
            rc = block.ref_cnt - 1
            if rc < 0:
                raise AssertionError(f"ref_cnt of block {block.block_id} would become negative")
            block.ref_cnt = rc
            if rc:
                return
            queue = self.free_block_queue
            if self.enable_caching and block.block_hash is not None:
                tail = queue._tail
                prev = tail.prev_free_block
                prev.next_free_block = block
                block.prev_free_block = prev
                block.next_free_block = tail
                tail.prev_free_block = block
            else:
                queue.front.append(block)
            queue.num_free_blocks += 1
            return
        # The usual list: this pool's blocks, each held once, unhashed (so bound for the head). They are
        # released in a loop that only checks and counts down, then stacked on `front` with one extend; the
        # first block that needs more (hashed, shared, foreign, null, already free) hands the rest of the list,
        # with the blocks released before it, to the full pass (which also sends a keyed block to the head
        # when caching is off).
        own = self._weak_self
        for block in ordered_blocks:
            if block.ref_cnt != 1 or block.pool is not own or block.block_hash is not None:
                break
            block.ref_cnt = 0
        else:
            queue = self.free_block_queue
            queue.front += reversed(ordered_blocks)
            queue.num_free_blocks += len(ordered_blocks)
            return
        stop = self._released_run_length(ordered_blocks, block)
        self._free_in_one_pass(islice(ordered_blocks, stop, None), False, ordered_blocks[:stop])

    def _released_run_length(self, ordered_blocks: list[KVCacheBlock], stopper: KVCacheBlock) -> int:
        """How many leading blocks `free_blocks`' first loop released before `stopper` stopped it.

        That is `stopper`'s position, unless the loop released `stopper` itself earlier in the list (the
        same block listed twice): then its count is 0 while it is on no queue yet (no prev link, not on
        `front`), and the loop stopped at its next occurrence."""
        stop = ordered_blocks.index(stopper)
        if stopper.ref_cnt == 0 and stopper.pool is self._weak_self and stopper.prev_free_block is None \
                and stopper not in self.free_block_queue.front:
            stop = ordered_blocks.index(stopper, stop + 1)
        return stop

    def _free_in_one_pass(self, ordered_blocks: Iterable[KVCacheBlock], evict_first: bool,
                          to_head: list[KVCacheBlock]) -> None:
        """`free_blocks` for any iterable, after the blocks in `to_head` were released (bound for the head)."""
        # One pass: the blocks reaching 0 that go to the head are collected in the given order, then put on
        # the queue's `front` reversed (the first of them on top: the head); those that go to the tail are
        # chained as they come, hung off the pool's scratch node so the loop has no first-block branch, and
        # the chain is spliced in once. The null block names no pool, so one identity test sends it and
        # foreign blocks to the slow branch.
        own = self._weak_self
        keep_keyed = self.enable_caching and not evict_first
        t_start = t_last = self._tail_chain
        num_to_tail = 0
        foreign = None
        try:
            for block in ordered_blocks:
                if block.ref_cnt == 1 and block.pool is own:
                    block.ref_cnt = 0
                    if block.block_hash is None or not keep_keyed:
                        to_head.append(block)
                    else:
                        t_last.next_free_block = block
                        block.prev_free_block = t_last
                        t_last = block
                        num_to_tail += 1
                elif block.pool is not own:
                    if not block.is_null:
                        if foreign is None:
                            foreign = []
                        foreign.append(block)
                elif block.ref_cnt < 1:
                    raise AssertionError(f"ref_cnt of block {block.block_id} would become negative")
                else:
                    block.ref_cnt -= 1
        finally:
            # Also when a block's count would go negative: the blocks released before it join the queue.
            queue = self.free_block_queue
            if num_to_tail:
                tail = queue._tail
                _splice(tail.prev_free_block, t_start.next_free_block, t_last, tail)
                queue.num_free_blocks += num_to_tail
            if to_head:
                if evict_first and self.enable_caching and any(b.block_hash is not None for b in to_head):
                    queue.prepend_n(to_head)  # keyed blocks stay off `front`: linked in at the head, in order
                else:
                    to_head.reverse()
                    queue.front += to_head
                    queue.num_free_blocks += len(to_head)
        if foreign:
            self._free_foreign_blocks(foreign, evict_first)

    @staticmethod
    def _free_foreign_blocks(blocks: list[KVCacheBlock], evict_first: bool = False) -> None:
        """Release blocks this pool does not own: another pool's go back to it; a detached block (built
        outside any pool, e.g. a test's hand-made table) only loses a reference and never enters a queue."""
        by_pool: dict[int, tuple[BlockPool, list[KVCacheBlock]]] = {}
        for block in blocks:
            pool = None if block.pool is None else block.pool()
            if pool is None:
                block.ref_cnt -= 1
            else:
                by_pool.setdefault(id(pool), (pool, []))[1].append(block)
        for pool, owned in by_pool.values():
            pool.free_blocks(owned, evict_first=evict_first)

    def evict_blocks(self, block_ids: Iterable[int]) -> None:
        """Drop the prefix-cache entries of these blocks (ref counts unchanged)."""
        blocks = self.blocks
        for block_id in block_ids:
            if not isinstance(block_id, int) or not 0 <= block_id < self.num_gpu_blocks:
                raise ValueError(f"block_ids: {block_id!r} is not a block id of this pool (0..{self.num_gpu_blocks - 1})")
            block = blocks[block_id]
            if block.block_hash is not None:
                self._evict_cached(block)

    def reset_prefix_cache(self) -> bool:
        """Clear the prefix cache; refused (False) unless every block but the null block is free."""
        num_used = self.num_gpu_blocks - self.free_block_queue.num_free_blocks
        if num_used != 1:
            logger.warning("Failed to reset prefix cache because some blocks (%d) are not freed yet", num_used - 1)
            return False
        # In place: the map object stays the one handed out (and frozen by gc.freeze(), as in vLLM 0.34).
        self.cached_block_hash_to_block.clear()
        self.cached_block_hashes_by_block.clear()
        if self._reuse_watchers:
            self._notify_reuse([self.blocks[i] for i in list(self._reuse_watchers)])
        for block in self.blocks:
            block.block_hash = None
            block.block_hash_num_tokens = None
        if self.enable_kv_cache_events:
            self.kv_event_queue.append(event_classes().AllBlocksCleared())
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

    def take_events(self) -> list:
        """Drain the KV cache events emitted since the last call ([] when events are off)."""
        if not self.enable_kv_cache_events:
            return []
        events, self.kv_event_queue = self.kv_event_queue, []
        return events

    def hashes_at(self, request, block_size: int) -> Sequence[bytes]:
        """The request's hash list viewed at `block_size`."""
        if block_size == self.hash_block_size:
            return request.block_hashes
        return BlockHashListWithBlockSize(request.block_hashes, self.hash_block_size, block_size)


def _lora_id(lora) -> int | None:
    # vLLM's LoRARequest says adapter_id, the reference's lora_int_id
    if not lora:
        return None
    return lora.adapter_id if hasattr(lora, "adapter_id") else lora.lora_int_id


def _lora_name(lora) -> str | None:
    if not lora:
        return None
    return lora.name if hasattr(lora, "name") else lora.lora_name


class SharedEventQueueBlockPool(BlockPool):
    """A pool whose KV cache events go into another pool's queue (HiSparse's host pool reports through the
    device pool, so one `take_events` drains both). The queue is read through the owner on every access:
    the owner swaps in a fresh list each time it is drained."""

    def __init__(self, *args, event_owner: BlockPool, **kwargs):
        self._event_owner = event_owner
        super().__init__(*args, **kwargs)

    @property
    def kv_event_queue(self) -> list:
        """The owner's live event queue."""
        return self._event_owner.kv_event_queue

    @kv_event_queue.setter
    def kv_event_queue(self, events: list) -> None:
        # Only BlockPool.__init__ (and a drain through this pool) assign here; the owner keeps the queue.
        if events:
            raise ValueError("SharedEventQueueBlockPool: the event queue belongs to the owner pool")
