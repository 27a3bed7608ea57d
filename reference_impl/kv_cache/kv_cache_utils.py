"""Blocks, the free queue, prefix block hashes and KV cache sizing helpers (vLLM 0.33's `kv_cache_utils`).

hash(block i) = H((parent, tuple(tokens of block i), extra_keys)) with parent = hash(block i-1), or
NONE_HASH for the first block. H = SHA-256 of the pickled tuple (vLLM's default `sha256`), so hashes are
stable across processes: nothing here uses Python's randomised `hash()`.
"""

from __future__ import annotations

import ctypes
import gc
import hashlib
import logging
import os
import pickle
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import NamedTuple

from reference_impl.kv_cache.kv_cache_spec_registry import KVCacheSpecRegistry

__all__ = [
    "BlockHash",
    "BlockHashWithGroupId",
    "ExternalBlockHash",
    "NONE_HASH_SEED",
    "DEFAULT_NONE_HASH_SEED",
    "KVCacheBlock",
    "KVCacheBlockCopy",
    "gc_untrack",
    "untracked_list",
    "FreeKVCacheBlockQueue",
    "null_head_len",
    "trim_null_head",
    "sha256",
    "resolve_none_hash_seed",
    "init_none_hash",
    "get_none_hash",
    "get_none_hash_seed",
    "hash_block_tokens",
    "make_block_hash_with_group_id",
    "get_block_hash",
    "get_group_id",
    "maybe_convert_block_hash",
    "BlockHashListWithBlockSize",
    "resolve_block_hashes",
    "resolve_kv_cache_block_sizes",
    "update_kv_cache_capacity",
    "tensor_data",
    "generate_block_hash_extra_keys",
    "to_event_extra_keys",
    "get_request_block_hasher",
    "frontend_block_hashes",
    "resolve_dcp_kv_block_size",
    "resolve_dcp_kv_cache_spec",
    "get_max_concurrency_for_kv_cache_config",
    "partial_hash_hits_enabled",
    "resolve_cache_hit_alignment_tokens",
    "eagle_proof_margin",
    "get_kv_cache_capacity",
    "generate_scheduler_kv_cache_config",
]

BlockHash = bytes
BlockHashWithGroupId = bytes
ExternalBlockHash = bytes | int

# Seed of NONE_HASH when PYTHONHASHSEED is unset (the SHA-256 variants are reproducible by design).
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
NONE_HASH_SEED = DEFAULT_NONE_HASH_SEED

_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL
_sha256 = hashlib.sha256
_dumps = pickle.dumps


def sha256(obj) -> bytes:
    """SHA-256 of `pickle.dumps(obj, HIGHEST_PROTOCOL)`."""
    return _sha256(_dumps(obj, _PICKLE_PROTOCOL)).digest()


# CPython's own call (the GIL is held: PyDLL); an untracked container is never re-tracked for a list.
_PyObject_GC_UnTrack = ctypes.pythonapi.PyObject_GC_UnTrack
_PyObject_GC_UnTrack.argtypes = [ctypes.py_object]
_PyObject_GC_UnTrack.restype = None


def gc_untrack(obj):
    """`obj`, hidden from the cyclic GC so that no collection walks its elements (refcounting still frees
    it). Only for containers that can never be part of a cycle: a list of blocks (blocks refer to their pool
    weakly and to no list) or a dict of bytes and ints."""
    if gc.is_tracked(obj):
        _PyObject_GC_UnTrack(obj)
    return obj


def untracked_list() -> list:
    """An empty list the cyclic GC never walks (see `gc_untrack`)."""
    return gc_untrack([])


class KVCacheBlock:
    """Metadata of one block id: ref count, prefix-cache key and the free-queue links.

    `block_hash` and `block_hash_num_tokens` are plain attributes (vLLM 0.34; 0.33 read them through
    properties over `_block_hash`, which stays as an alias). `pool` is the owning pool, held weakly (a
    `weakref.ref`, as in 0.34) so that blocks and their pool form no reference cycle for the GC to walk.
    """

    __slots__ = ("block_id", "ref_cnt", "block_hash", "block_hash_num_tokens", "prev_free_block",
                 "next_free_block", "is_null", "pool")

    def __init__(self, block_id: int, ref_cnt: int = 0, *, pool=None, is_null: bool = False):
        self.block_id = block_id
        self.ref_cnt = ref_cnt
        #: The prefix-cache key (hash + group id) while the block is registered, else None.
        self.block_hash: bytes | None = None
        #: Prefix tokens the key covers (a block boundary, or inside the block for a partial entry).
        self.block_hash_num_tokens: int | None = None
        self.prev_free_block: KVCacheBlock | None = None
        self.next_free_block: KVCacheBlock | None = None
        self.is_null = is_null
        self.pool = pool

    @property
    def _block_hash(self) -> bytes | None:
        """0.33's private name of `block_hash`."""
        return self.block_hash

    @property
    def _block_hash_num_tokens(self) -> int | None:
        """0.33's private name of `block_hash_num_tokens`."""
        return self.block_hash_num_tokens

    def set_block_hash(self, block_hash: bytes, num_tokens: int | None = None) -> None:
        """Register the block's key; a block carries at most one key at a time."""
        assert self.block_hash is None and self.block_hash_num_tokens is None, \
            "The block already has a hash. This should not happen."
        self.block_hash = block_hash
        self.block_hash_num_tokens = num_tokens

    def reset_hash(self) -> None:
        """Forget the key (on eviction)."""
        self.block_hash = None
        self.block_hash_num_tokens = None

    def __repr__(self) -> str:
        return f"KVCacheBlock(block_id={self.block_id}, ref_cnt={self.ref_cnt}, cached={self.block_hash is not None})"


class FreeKVCacheBlockQueue:
    """Doubly linked free list threaded through the blocks, with sentinel head/tail (id -1), behind `front`,
    a stack of free blocks at the head.

    The head is reused first; with prefix caching the queue doubles as the LRU list of evictable cached
    blocks. The queue's order is `front` from its last element to its first, then the linked list;
    `num_free_blocks` counts both. A pool keeps on `front` the blocks it frees to the head (unhashed ones,
    reused first, LIFO; never a block with a prefix-cache key) and a new pool's blocks: handing them out is a
    slice of a list, without link surgery, and the usual next allocation takes back exactly the blocks freed
    last. The order is vLLM's.

    Blocks on `front` carry no prev link (None; their next link may be stale), while every linked block has
    one: that tells the two apart in O(1), and `remove` takes a block off `front` without linking the rest.
    Whatever reads or edits links at the head (`popleft_n` past `front`, `prepend_n`, reading
    `fake_free_list_head` or `fake_free_list_tail`) first links `front` in (`link_front`), so that a walk
    from a sentinel sees every free block, as in vLLM. A pool that hands out linked blocks clears their prev
    link (`BlockPool.get_new_blocks`) so that they reach `front` without one.
    """

    __slots__ = ("num_free_blocks", "front", "_head", "_tail")

    def __init__(self, blocks: Sequence[KVCacheBlock], *, linked: bool = True):
        """The queue of `blocks`, `blocks[0]` at the head; `linked=False` puts them on `front` (a pool's
        initial blocks: they are handed out from there, in the same order, without being linked first)."""
        self.num_free_blocks = 0
        head = KVCacheBlock(-1)
        tail = KVCacheBlock(-1)
        head.next_free_block, tail.prev_free_block = tail, head
        self._head = head
        self._tail = tail
        #: Free blocks ahead of the linked list, the last one at the head (see the class docstring).
        self.front: list[KVCacheBlock] = untracked_list()
        if linked:
            self.append_n(blocks)
        else:
            self.front.extend(reversed(blocks))
            self.num_free_blocks = len(self.front)

    @property
    def fake_free_list_head(self) -> KVCacheBlock:
        """The head sentinel (`front` linked in first, so that its `next_free_block` is the real head)."""
        if self.front:
            self.link_front()
        return self._head

    @property
    def fake_free_list_tail(self) -> KVCacheBlock:
        """The tail sentinel (`front` linked in first, so that a walk back from it sees every free block)."""
        if self.front:
            self.link_front()
        return self._tail

    def link_front(self) -> None:
        """Link the blocks of `front` in at the head of the linked list, in queue order, and empty it."""
        front = self.front
        head = self._head
        nxt = head.next_free_block
        for block in front:  # from the queue-last of them: each goes in before the one linked before it
            block.next_free_block = nxt
            nxt.prev_free_block = block
            nxt = block
        head.next_free_block = nxt
        nxt.prev_free_block = head
        front.clear()

    def popleft(self) -> KVCacheBlock:
        """Remove and return the head block."""
        if self.num_free_blocks == 0:
            raise ValueError("No free blocks available")
        return self.popleft_n(1)[0]

    def popleft_n(self, n: int) -> list[KVCacheBlock]:
        """Remove and return the first n blocks in queue order (caller guarantees n <= free)."""
        if n == 0:
            return []
        front = self.front
        if n <= len(front):
            out = front[:-n - 1:-1]
            del front[-n:]
            for block in out:  # a block on `front` kept stale links
                block.prev_free_block = block.next_free_block = None
            self.num_free_blocks -= n
            return out
        if front:
            self.link_front()
        head = self._head
        cur = head.next_free_block
        out = []
        append = out.append
        for _ in range(n):
            append(cur)
            nxt = cur.next_free_block
            cur.prev_free_block = cur.next_free_block = None
            cur = nxt
        head.next_free_block = cur
        cur.prev_free_block = head
        self.num_free_blocks -= n
        return out

    def remove(self, block: KVCacheBlock) -> None:
        """Take a block out of the queue from anywhere in it; the other blocks keep their order."""
        prev, nxt = block.prev_free_block, block.next_free_block
        if prev is None:
            # Not linked, so on `front` if free: looked for from the top of the stack (the head end, where
            # the blocks freed last sit; the cost is the blocks above it) and taken out without linking the rest.
            front = self.front
            for i in range(len(front) - 1, -1, -1):
                if front[i] is block:
                    del front[i]
                    self.num_free_blocks -= 1
                    return
            raise RuntimeError(f"remove() called on a block that is not free: {block}")
        if nxt is None:
            raise RuntimeError(f"remove() called on a block that is not free: {block}")
        prev.next_free_block = nxt
        nxt.prev_free_block = prev
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1

    def append(self, block: KVCacheBlock) -> None:
        """Link a block at the tail."""
        self.append_n((block,))

    def append_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Link blocks at the tail, in the given order."""
        if not blocks:
            return
        tail = self._tail
        prev = tail.prev_free_block
        assert prev is not None, "prev_free_block of fake_free_list_tail should always exist"
        for block in blocks:
            prev.next_free_block = block
            block.prev_free_block = prev
            prev = block
        prev.next_free_block = tail
        tail.prev_free_block = prev
        self.num_free_blocks += len(blocks)

    def prepend_n(self, blocks: Sequence[KVCacheBlock]) -> None:
        """Link blocks at the head; blocks[0] becomes the new head."""
        if not blocks:
            return
        if self.front:
            self.link_front()
        head = self._head
        nxt = head.next_free_block
        for block in reversed(blocks):
            nxt.prev_free_block = block
            block.next_free_block = nxt
            nxt = block
        head.next_free_block = nxt
        nxt.prev_free_block = head
        self.num_free_blocks += len(blocks)

    def get_all_free_blocks(self) -> list[KVCacheBlock]:
        """Head-to-tail list of the free blocks (for tests)."""
        out = self.front[::-1]
        cur = self._head.next_free_block
        tail = self._tail
        while cur is not tail:
            out.append(cur)
            cur = cur.next_free_block
        return out


def null_head_len(blocks: Sequence[KVCacheBlock]) -> int:
    """Number of leading null blocks of a table (a window's skipped prefix)."""
    n = 0
    for block in blocks:
        if not block.is_null:
            break
        n += 1
    return n


def trim_null_head(blocks):
    """`blocks` without its leading null blocks (`blocks` itself when there are none)."""
    n = null_head_len(blocks)
    return blocks[n:] if n else blocks


class KVCacheBlockCopy(NamedTuple):
    """A copy-on-write of one block's content: the worker copies `src_block_id` into `dst_block_id`."""

    src_block_id: int
    dst_block_id: int


# The parent hash of every request's first block; `init_none_hash` sets it (module global, as in vLLM,
# so that tests can swap it).
NONE_HASH: BlockHash | None = None


# Hash functions that are not collision resistant: their seed must stay secret, so it is random per process.
_NON_CRYPTO_HASH_NAMES = frozenset({"xxhash", "xxhash_cbor"})


def resolve_none_hash_seed(hash_fn: Callable) -> str:
    """$PYTHONHASHSEED if set; else DEFAULT_NONE_HASH_SEED for cryptographic hashes (shareable across
    processes) and fresh random bytes for non-cryptographic ones (xxhash)."""
    seed = os.environ.get("PYTHONHASHSEED")
    if seed is not None:
        return seed
    if getattr(hash_fn, "__name__", "") in _NON_CRYPTO_HASH_NAMES:
        return os.urandom(32).hex()
    return DEFAULT_NONE_HASH_SEED


# The seed NONE_HASH was last derived from (None until `init_none_hash` runs).
_NONE_HASH_SEED: str | None = None


def init_none_hash(hash_fn: Callable = sha256) -> bytes:
    """Set and return NONE_HASH = hash_fn(seed)."""
    global NONE_HASH, _NONE_HASH_SEED
    _NONE_HASH_SEED = resolve_none_hash_seed(hash_fn)
    NONE_HASH = hash_fn(_NONE_HASH_SEED)
    return NONE_HASH


def get_none_hash_seed() -> str:
    """The seed NONE_HASH was derived from (a random one included), for peers that must agree on it;
    DEFAULT_NONE_HASH_SEED before `init_none_hash` has run."""
    return DEFAULT_NONE_HASH_SEED if _NONE_HASH_SEED is None else _NONE_HASH_SEED


def get_none_hash(hash_fn: Callable = sha256) -> bytes:
    """The parent hash of a request's first block (initialised with `hash_fn` on first use)."""
    return init_none_hash(hash_fn) if NONE_HASH is None else NONE_HASH


def hash_block_tokens(hash_fn: Callable, parent_block_hash: bytes | None, curr_block_token_ids: Sequence[int],
                      extra_keys: tuple | None = None) -> BlockHash:
    """Hash of one full block chained to its parent (None parent -> NONE_HASH)."""
    if not parent_block_hash:
        parent_block_hash = get_none_hash(hash_fn)
    return hash_fn((parent_block_hash, tuple(curr_block_token_ids), extra_keys))


def make_block_hash_with_group_id(block_hash: BlockHash, group_id: int) -> BlockHashWithGroupId:
    """Prefix-cache key: the hash bytes followed by the group id as 4 bytes big-endian."""
    return block_hash + group_id.to_bytes(4, "big")


def get_block_hash(key: BlockHashWithGroupId) -> BlockHash:
    """The hash part of a prefix-cache key."""
    return key[:-4]


def get_group_id(key: BlockHashWithGroupId) -> int:
    """The group id part of a prefix-cache key."""
    return int.from_bytes(key[-4:], "big")


def maybe_convert_block_hash(hash_bytes: BlockHash) -> ExternalBlockHash:
    """The hash as KV events publish it: its low 64 bits as an int (big-endian), vLLM's default, or the
    bytes themselves when $VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES is 0."""
    raw = os.environ.get("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "1")
    try:
        as_int = bool(int(raw))
    except ValueError:
        raise ValueError(f"VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES must be an integer (0 or 1), got {raw!r}") from None
    if not as_int:
        return hash_bytes
    return int.from_bytes(hash_bytes, "big") & ((1 << 64) - 1)


class BlockHashListWithBlockSize:
    """A fine-grained hash list viewed at a coarser block size: coarse hash j = fine hash (j+1)*k - 1.

    The chain already covers the whole prefix, so the last fine hash inside a coarse block identifies it.
    """

    __slots__ = ("block_hashes", "scale_factor")

    def __init__(self, block_hashes: Sequence[BlockHash], hash_block_size: int, target_block_size: int):
        assert target_block_size % hash_block_size == 0, (
            f"block_size ({target_block_size}) must be a multiple of hash_block_size ({hash_block_size})")
        self.block_hashes = block_hashes
        self.scale_factor = target_block_size // hash_block_size

    def __len__(self) -> int:
        return len(self.block_hashes) // self.scale_factor

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return [self[i] for i in range(*idx.indices(len(self)))]
        if not isinstance(idx, int):
            raise TypeError(f"Invalid index type: {type(idx)!r}")
        if idx < 0:
            idx += len(self)
        if not 0 <= idx < len(self):
            raise IndexError(idx)
        return self.block_hashes[(idx + 1) * self.scale_factor - 1]

    def __iter__(self):
        k = self.scale_factor
        return iter(self.block_hashes[k - 1 : len(self) * k : k])


def resolve_block_hashes(block_hashes, hash_block_size: int, block_size: int, *,
                         supports_fine_grained_hash_lookup: bool = False, alignment_tokens: int | None = None):
    """The hash list a group of `block_size` looks up: the list itself at the hash block size (or for a
    fine-grained lookup aligned below the block size), else a coarser view."""
    if block_size == hash_block_size:
        return block_hashes
    # Duck-typed, not isinstance: a view built before this module was reloaded (vLLM's tests reload it)
    # is an instance of the previous class object and must not be wrapped a second time.
    if getattr(block_hashes, "scale_factor", None) is not None:
        assert block_hashes.scale_factor == block_size // hash_block_size
        return block_hashes
    if supports_fine_grained_hash_lookup and alignment_tokens is not None \
            and alignment_tokens < block_size and block_size % alignment_tokens == 0:
        return block_hashes
    return BlockHashListWithBlockSize(block_hashes, hash_block_size, block_size)


def tensor_data(tensor) -> memoryview:
    """The raw bytes of a tensor (CPU, contiguous), for hashing prompt embeddings."""
    import torch  # only prompt-embeds requests need torch here

    flat = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    return memoryview(flat.numpy())


def _mm_range(feature) -> tuple[int, int]:
    position = getattr(feature, "mm_position", None)
    if position is not None:
        return position.offset, position.length
    return feature.offset, feature.length


def _extra_keys(request, start: int, end: int, start_mm_idx: int = 0) -> tuple[tuple | None, int]:
    keys: list[tuple] = []
    lora = getattr(request, "lora_request", None)
    if lora:
        keys.append(("lora", lora.lora_name, lora.lora_path))
    mm_idx = start_mm_idx
    features = getattr(request, "mm_features", None) or ()
    if features:
        if mm_idx < 0:
            mm_idx += len(features)
        while mm_idx < len(features):
            offset, length = _mm_range(features[mm_idx])
            if end <= offset:
                break
            if start >= offset + length:
                mm_idx += 1
                continue
            keys.append(("mm", features[mm_idx].identifier, offset - start))
            if end >= offset + length:
                mm_idx += 1
            else:
                break
    salt = getattr(request, "cache_salt", None)
    if salt and start == 0:
        keys.append(("cache_salt", salt))
    embeds = getattr(request, "prompt_embeds", None)
    if embeds is not None:
        keys.append(("prompt_embeds", _prompt_embeds_digest(request, embeds, start, end)))
    return (tuple(keys) if keys else None), mm_idx


def _prompt_embeds_digest(request, embeds, start: int, end: int) -> bytes:
    """SHA-256 of the block's prompt embeddings, memoised on the request per (start, end): hashing a
    block's embeddings is costly and a block is hashed again on every lookup."""
    memo = getattr(request, "_prompt_embeds_per_block_hashes", None)
    if memo is None:
        memo = {}
        try:
            request._prompt_embeds_per_block_hashes = memo
        except AttributeError:  # a request type with fixed slots: no memo, hash every time
            memo = None
    digest = memo.get((start, end)) if memo is not None else None
    if digest is None:
        chunk = embeds[start:end]
        data = bytes(chunk) if isinstance(chunk, (bytes, bytearray, memoryview)) else tensor_data(chunk)
        digest = hashlib.sha256(data).digest()
        if memo is not None:
            memo[(start, end)] = digest
    return digest


def generate_block_hash_extra_keys(request, start_token_idx: int, end_token_idx: int,
                                   start_mm_idx: int = 0) -> tuple[tuple | None, int]:
    """(extra keys of the block [start, end), index of the next multimodal item to check).

    Keys are tagged tuples in this order: ("lora", name, path) on every block; ("mm", identifier,
    item_offset - block_start) per overlapping multimodal item; ("cache_salt", salt) on the block starting
    at token 0 only; ("prompt_embeds", digest). None when there is none.
    """
    return _extra_keys(request, start_token_idx, end_token_idx, start_mm_idx)


def to_event_extra_keys(extra_keys: Iterable[tuple | None] | None) -> list[tuple | None] | None:
    """Per-block extra keys in the untagged form KV events publish: bare LoRA names and salts,
    (identifier, offset) pairs for multimodal items, bare prompt-embeds digests."""
    if not extra_keys:
        return None
    out = [None if keys is None else tuple(k[1:] if k[0] == "mm" else k[1] for k in keys) for keys in extra_keys]
    return out or None


def _has_no_extra_keys(request) -> bool:
    flag = getattr(request, "has_no_extra_keys", None)
    if flag is not None:
        return flag
    return not getattr(request, "lora_request", None) and not getattr(request, "cache_salt", None) \
        and not getattr(request, "mm_features", None) and getattr(request, "prompt_embeds", None) is None


def frontend_block_hashes(request, prefix_hash_config) -> list[BlockHash] | None:
    """The prompt block hashes a frontend computed for `request` (an engine-core request), or None when
    there are none or their count is not the one the engine would compute: one per full hash block of the
    prompt whose lookahead tokens exist too (`(prompt_len - lookahead) // hash_block_size`). The engine
    then hashes the prompt itself."""
    block_hashes = getattr(request, "block_hashes", None)
    if block_hashes is None:
        return None
    prompt = getattr(request, "prompt_token_ids", None)
    prompt_len = 0 if prompt is None else len(prompt)
    if prefix_hash_config is not None:
        lookahead = getattr(prefix_hash_config, "num_lookahead_tokens", 0) or 0
        expected = max(prompt_len - lookahead, 0) // prefix_hash_config.hash_block_size
        if len(block_hashes) == expected:
            return list(block_hashes)
    if not _FRONTEND_HASH_WARNED:
        _FRONTEND_HASH_WARNED.append(True)
        logging.getLogger(__name__).warning(
            "Ignoring frontend-computed prompt block hashes that do not match the engine's prefix hash "
            "config; the engine hashes the prompts itself.")
    return None


_FRONTEND_HASH_WARNED: list[bool] = []


def get_request_block_hasher(hash_block_size: int, caching_hash_fn: Callable = sha256,
                             num_hash_lookahead_tokens: int = 0) -> Callable:
    """A per-request hasher: called with a request, returns the hashes of its newly completed full blocks.

    With `num_hash_lookahead_tokens` L > 0 a block's hash also covers the L tokens after it (a drafter's KV
    at the block's last position depends on them): it is emitted once they exist, and the extra keys become
    (keys of the block and its lookahead, *lookahead tokens).
    """
    if isinstance(hash_block_size, bool) or not isinstance(hash_block_size, int) or hash_block_size <= 0:
        raise ValueError(f"hash_block_size must be a positive integer, got {hash_block_size!r}")
    if not isinstance(num_hash_lookahead_tokens, int) or num_hash_lookahead_tokens < 0:
        raise ValueError(f"num_hash_lookahead_tokens must be a non-negative integer, got {num_hash_lookahead_tokens!r}")
    block_size = hash_block_size
    hash_fn = caching_hash_fn
    lookahead = int(num_hash_lookahead_tokens)

    def request_block_hasher(request) -> list[BlockHash]:
        hashes = request.block_hashes
        start = len(hashes) * block_size
        tokens = request.all_token_ids
        n_tokens = len(tokens) - lookahead
        if start + block_size > n_tokens:
            return []
        parent = hashes[-1] if hashes else get_none_hash(hash_fn)
        plain = _has_no_extra_keys(request)
        new: list[BlockHash] = []
        mm_idx = 0
        while start + block_size <= n_tokens:
            end = start + block_size
            if lookahead:
                extra, _ = (None, 0) if plain else _extra_keys(request, start, end + lookahead, 0)
                extra = (extra, *tokens[end:end + lookahead])
            elif plain:
                extra = None
            else:
                extra, mm_idx = _extra_keys(request, start, end, mm_idx)
            parent = hash_fn((parent, tuple(tokens[start:end]), extra))
            new.append(parent)
            start = end
        return new

    return request_block_hasher


# ----------------------------------------------------------------------------------------------- sizing
def _dcp_sharded(spec) -> bool:
    # Attention layers shard token positions across DCP ranks; state layers (Mamba) do not.
    return getattr(spec, "dcp_sharded", None) is True or (
        getattr(spec, "dcp_sharded", None) is None and hasattr(spec, "num_kv_heads"))


def resolve_dcp_kv_block_size(spec, dcp_world_size: int) -> int:
    """Tokens one block of `spec` spans under decode context parallelism of `dcp_world_size` ranks:
    attention blocks scale with the world size, Mamba state blocks do not."""
    return spec.block_size * (dcp_world_size if _dcp_sharded(spec) else 1)


def resolve_dcp_kv_cache_spec(spec, dcp_world_size: int):
    """`spec` with its block size as DCP spans it (the same object when unchanged)."""
    block_size = resolve_dcp_kv_block_size(spec, dcp_world_size)
    if block_size == spec.block_size:
        return spec
    layers = getattr(spec, "kv_cache_specs", None)
    if layers:  # a same-type wrapper: its layers span what it spans
        return replace(spec, block_size=block_size,
                       kv_cache_specs={name: resolve_dcp_kv_cache_spec(layer, dcp_world_size)
                                       for name, layer in layers.items()})
    return replace(spec, block_size=block_size)


def _max_model_len(vllm_config) -> int:
    return vllm_config.model_config.max_model_len


def get_max_concurrency_for_kv_cache_config(vllm_config, kv_cache_config) -> float:
    """Requests of max_model_len tokens the pool holds at once: num_blocks / blocks one request needs,
    summed over the device groups (they share one pool). HiSparse's host groups draw from the host pool
    instead, which bounds concurrency too: the smaller limit applies."""
    per_request = host_per_request = 0
    for group in kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        blocks = -(-spec.max_memory_usage_bytes(vllm_config) // spec.page_size_bytes)
        if getattr(group, "host_resident", False):
            host_per_request += blocks
        else:
            per_request += blocks
    concurrency = kv_cache_config.num_blocks / per_request
    if host_per_request:
        host_blocks = kv_cache_config.hisparse_host_num_blocks
        if host_blocks is None:
            raise ValueError("KVCacheConfig.hisparse_host_num_blocks is None but a group is host_resident")
        concurrency = min(concurrency, host_blocks / host_per_request)
    return concurrency


def get_kv_cache_capacity(vllm_config, kv_cache_config) -> tuple[int, float]:
    """(token capacity, max concurrency) of the pool for max_model_len requests."""
    concurrency = get_max_concurrency_for_kv_cache_config(vllm_config, kv_cache_config)
    return int(concurrency * _max_model_len(vllm_config)), concurrency


def _kv_cache_device_name(vllm_config) -> str:
    """The device the KV cache pool lives on, as the capacity log names it ("GPU" for CUDA)."""
    device_type = getattr(getattr(vllm_config, "device_config", None), "device_type", "cuda")
    return "GPU" if device_type == "cuda" else str(device_type).upper()


def update_kv_cache_capacity(vllm_config, kv_cache_config) -> None:
    """Store the pool's token capacity and max concurrency in `cache_config` (`kv_cache_size_tokens`,
    `kv_cache_max_concurrency`) and log them."""
    import logging

    num_tokens, concurrency = get_kv_cache_capacity(vllm_config, kv_cache_config)
    vllm_config.cache_config.kv_cache_size_tokens = num_tokens
    vllm_config.cache_config.kv_cache_max_concurrency = concurrency
    pools = _kv_cache_device_name(vllm_config)
    if getattr(getattr(vllm_config, "attention_config", None), "hisparse_config", None) is not None:
        pools += " + host"
    logging.getLogger(__name__).info("%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx",
                                     pools, f"{num_tokens:,}", f"{_max_model_len(vllm_config):,}", concurrency)


def generate_scheduler_kv_cache_config(kv_cache_configs: list):
    """The scheduler's config from the workers' (equal block counts): the first, with any group of
    same-type layers (`UniformTypeKVCacheSpecs`) represented by one of its layer specs."""
    import copy

    assert all(cfg.num_blocks == kv_cache_configs[0].num_blocks for cfg in kv_cache_configs)
    cfg = copy.deepcopy(kv_cache_configs[0])
    for group in cfg.kv_cache_groups:
        specs = getattr(group.kv_cache_spec, "kv_cache_specs", None)
        if specs:
            group.kv_cache_spec = next(iter(specs.values()))
    return cfg


def _layer_specs(spec) -> tuple:
    specs = getattr(spec, "kv_cache_specs", None)
    return tuple(specs.values()) if specs else (spec,)


def partial_hash_hits_enabled(kv_cache_groups, hash_block_size: int, dcp_world_size: int = 1,
                              manager_classes=None) -> bool:
    """Whether hits may end on any hash boundary (below a block): needs a Mamba "align" group whose block
    is larger than the hash block, and (when `manager_classes` are given, one per group) every other
    prefix-cacheable group able to look hits up at hash granularity."""
    if not any(type(s).__name__ == "MambaSpec" and s.mamba_cache_mode == "align"
               and (s.block_size > hash_block_size if dcp_world_size == 1 else s.block_size >= hash_block_size)
               for g in kv_cache_groups for s in _layer_specs(g.kv_cache_spec)):
        return False
    if manager_classes is None:
        return True
    return all(not g.kv_cache_spec.prefix_cacheable or cls.supports_fine_grained_hash_lookup
               or resolve_dcp_kv_block_size(g.kv_cache_spec, dcp_world_size) == hash_block_size
               for g, cls in zip(kv_cache_groups, manager_classes))


def resolve_kv_cache_block_sizes(kv_cache_config, vllm_config) -> tuple[int, int]:
    """(scheduler block size, hash block size) of a planned config, as vLLM 0.33 resolves them.

    One group: `cache_config.block_size` (x the DCP world size for a DCP-sharded group) for both; a
    `prefix_match_unit` other than that is refused while hashes are used (prefix caching or a connector).
    Several groups: the scheduler block is the lcm of the groups' (DCP-scaled) block sizes; the hash block
    is `prefix_match_unit` or the gcd of the prefix-cacheable groups' sizes, and must divide each of them.
    No hashing (no caching, no connector) or a Mamba group outside "align" mode hashes at the scheduler
    block; prefix-cache boundaries must also align with every spec's per-state compression.
    """
    import math

    cache_config = vllm_config.cache_config
    dcp = getattr(getattr(vllm_config, "parallel_config", None), "decode_context_parallel_size", 1) or 1
    groups = kv_cache_config.kv_cache_groups
    requested = getattr(cache_config, "prefix_match_unit", None)
    hashing = bool(cache_config.enable_prefix_caching or getattr(vllm_config, "kv_transfer_config", None) is not None)
    if len(groups) <= 1:
        if groups and not _dcp_sharded(groups[0].kv_cache_spec):
            dcp = 1
        size = cache_config.block_size * dcp
        if requested not in (None, size) and len(groups) == 1 and hashing:
            raise ValueError(f"Invalid prefix_match_unit={requested}; with a single KV cache group, prefix-cache "
                             f"hits land on the block size ({size}). Unset it or set it to {size}.")
        return size, size
    sizes = [resolve_dcp_kv_block_size(g.kv_cache_spec, dcp) for g in groups]
    scheduler_block_size = math.lcm(*sizes)
    if not hashing:
        return scheduler_block_size, scheduler_block_size
    if any(type(s).__name__ == "MambaSpec" and s.mamba_cache_mode != "align"
           for g in groups for s in _layer_specs(g.kv_cache_spec)):
        return scheduler_block_size, scheduler_block_size
    hashed = [size for g, size in zip(groups, sizes) if g.kv_cache_spec.prefix_cacheable] or sizes
    hash_block_size = requested if requested is not None else math.gcd(*hashed)
    if any(size % hash_block_size for size in hashed):
        raise ValueError(f"Invalid prefix_match_unit={hash_block_size}; prefix-cacheable KV cache group block "
                         f"sizes must be divisible by prefix_match_unit. Got group block sizes={sizes}, "
                         f"prefix-cacheable={hashed}.")
    compressions = {s.tokens_per_state for g in groups for s in _layer_specs(g.kv_cache_spec)
                    if s.prefix_cacheable and isinstance(getattr(s, "tokens_per_state", None), int)
                    and s.tokens_per_state > 1}
    alignment = hash_block_size if partial_hash_hits_enabled(groups, hash_block_size, dcp) else scheduler_block_size
    if any(alignment % c for c in compressions):
        raise ValueError(f"Invalid prefix_match_unit={hash_block_size}; prefix-cache boundaries must align with "
                         f"each spec's per-state compression. Got alignments={sorted(compressions)}.")
    return scheduler_block_size, hash_block_size


def resolve_cache_hit_alignment_tokens(kv_cache_config, vllm_config, scheduler_block_size: int,
                                       hash_block_size: int) -> int:
    """Token granularity prefix-cache hits land on: the hash block size when partial hits are enabled
    (hybrid, caching on), else the scheduler block size."""
    groups = kv_cache_config.kv_cache_groups
    if not vllm_config.cache_config.enable_prefix_caching or len(groups) <= 1:
        return scheduler_block_size
    classes = [KVCacheSpecRegistry.get_manager_class(g.kv_cache_spec, g.role) for g in groups]
    dcp = getattr(getattr(vllm_config, "parallel_config", None), "decode_context_parallel_size", 1)
    return hash_block_size if partial_hash_hits_enabled(groups, hash_block_size, dcp, classes) \
        else scheduler_block_size


def eagle_proof_margin(block_size: int, hash_block_size: int, fine_grained_lookup: bool) -> int:
    """Tokens an EAGLE group looks past a hit before dropping them: one hash unit for fine-grained lookups
    (block larger than the hash block), else one block."""
    return hash_block_size if fine_grained_lookup and block_size > hash_block_size else block_size
