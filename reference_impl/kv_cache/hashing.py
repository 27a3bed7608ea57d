"""Prefix block hashes: the parent-chained hash, its extra keys and the per-group cache key.

hash(block i) = H((parent, tuple(tokens of block i), extra_keys)) with parent = hash(block i-1), or
NONE_HASH for the first block. H = SHA-256 of the pickled tuple (vLLM's default `sha256`), so hashes are
stable across processes: nothing here uses Python's randomised `hash()`.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Sequence

__all__ = [
    "BlockHash",
    "BlockHashWithGroupId",
    "NONE_HASH_SEED",
    "sha256",
    "init_none_hash",
    "get_none_hash",
    "hash_block_tokens",
    "make_block_hash_with_group_id",
    "get_block_hash",
    "get_group_id",
    "BlockHashListWithBlockSize",
    "generate_block_hash_extra_keys",
    "get_request_block_hasher",
]

BlockHash = bytes
BlockHashWithGroupId = bytes

# Seed of NONE_HASH when PYTHONHASHSEED is unset (the SHA-256 variants are reproducible by design).
NONE_HASH_SEED = "vllm-none-hash"

_PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL
_sha256 = hashlib.sha256
_dumps = pickle.dumps


def sha256(obj) -> bytes:
    """SHA-256 of `pickle.dumps(obj, HIGHEST_PROTOCOL)`."""
    return _sha256(_dumps(obj, _PICKLE_PROTOCOL)).digest()


_NONE_HASH: dict[Callable, bytes] = {}


def init_none_hash(hash_fn: Callable = sha256) -> bytes:
    """Compute NONE_HASH = H(seed) for `hash_fn`; seed = $PYTHONHASHSEED if set, else NONE_HASH_SEED."""
    seed = os.environ.get("PYTHONHASHSEED")
    value = hash_fn(NONE_HASH_SEED if seed is None else seed)
    _NONE_HASH[hash_fn] = value
    return value


def get_none_hash(hash_fn: Callable = sha256) -> bytes:
    """The parent hash of a request's first block."""
    value = _NONE_HASH.get(hash_fn)
    return init_none_hash(hash_fn) if value is None else value


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


class BlockHashListWithBlockSize:
    """A fine-grained hash list viewed at a coarser block size: coarse hash j = fine hash (j+1)*k - 1.

    The chain already covers the whole prefix, so the last fine hash inside a coarse block identifies it.
    """

    __slots__ = ("block_hashes", "scale_factor")

    def __init__(self, block_hashes: Sequence[BlockHash], hash_block_size: int, target_block_size: int):
        if target_block_size % hash_block_size:
            raise ValueError(
                f"block_size ({target_block_size}) must be a multiple of hash_block_size ({hash_block_size})"
            )
        self.block_hashes = block_hashes
        self.scale_factor = target_block_size // hash_block_size

    def __len__(self) -> int:
        return len(self.block_hashes) // self.scale_factor

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return [self[i] for i in range(*idx.indices(len(self)))]
        if idx < 0:
            idx += len(self)
        if not 0 <= idx < len(self):
            raise IndexError(idx)
        return self.block_hashes[(idx + 1) * self.scale_factor - 1]

    def __iter__(self):
        k = self.scale_factor
        return iter(self.block_hashes[k - 1 : len(self) * k : k])


def generate_block_hash_extra_keys(request, start_token_idx: int, end_token_idx: int) -> tuple | None:
    """Extra keys of the block [start, end): a tuple of tagged tuples, in this order:
    ("lora", name, path) on every block; ("mm", identifier, item_offset - block_start) per overlapping
    multimodal item; ("cache_salt", salt) on the block starting at token 0 only; ("prompt_embeds", digest).
    None when there is none.
    """
    keys: list[tuple] = []
    lora = getattr(request, "lora_request", None)
    if lora is not None:
        keys.append(("lora", lora.lora_name, lora.lora_path))
    for item in getattr(request, "mm_features", None) or ():
        if item.offset < end_token_idx and item.offset + item.length > start_token_idx:
            keys.append(("mm", item.identifier, item.offset - start_token_idx))
    salt = getattr(request, "cache_salt", None)
    if salt and start_token_idx == 0:
        keys.append(("cache_salt", salt))
    embeds = getattr(request, "prompt_embeds", None)
    if embeds is not None:
        keys.append(("prompt_embeds", hashlib.sha256(bytes(embeds[start_token_idx:end_token_idx])).digest()))
    return tuple(keys) if keys else None


def get_request_block_hasher(block_size: int, hash_fn: Callable = sha256) -> Callable:
    """A per-request hasher: called with a request, returns the hashes of its newly completed full blocks."""
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size <= 0:
        raise ValueError(f"hash_block_size must be a positive integer, got {block_size!r}")
    none_hash = get_none_hash(hash_fn)

    def request_block_hasher(request) -> list[BlockHash]:
        hashes = request.block_hashes
        start = len(hashes) * block_size
        tokens = request.all_token_ids
        n_tokens = len(tokens)
        if start + block_size > n_tokens:
            return []
        parent = hashes[-1] if hashes else none_hash
        plain = request.has_no_extra_keys
        new: list[BlockHash] = []
        while start + block_size <= n_tokens:
            end = start + block_size
            extra = None if plain else generate_block_hash_extra_keys(request, start, end)
            parent = hash_fn((parent, tuple(tokens[start:end]), extra))
            new.append(parent)
            start = end
        return new

    return request_block_hasher
