"""Prefix-chained chunk hashes, stable across processes (no use of Python's salted `hash()`).

Chunk i's hash is SHA-256 over (hash of chunk i-1, the chunk's token ids, extra keys). The cache salt
enters the first chunk only (the chain carries it to every later chunk); a LoRA name enters every chunk.
Only full chunks are hashed: a trailing partial chunk has no hash and is never stored.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import Sequence

NONE_HASH = hashlib.sha256(b"kvconform-lmcache-like-none-hash").digest()


def _extra_bytes(chunk_index: int, cache_salt: str | None, lora_name: str | None) -> bytes:
    parts = []
    if lora_name is not None:
        parts.append(b"lora:" + lora_name.encode())
    if cache_salt is not None and chunk_index == 0:
        parts.append(b"salt:" + cache_salt.encode())
    return b"\x00".join(parts)


def chunk_hashes(
    token_ids: Sequence[int],
    chunk_size: int,
    *,
    cache_salt: str | None = None,
    lora_name: str | None = None,
) -> list[bytes]:
    """Hashes of every full `chunk_size`-token chunk of `token_ids`, each chained on its predecessor."""
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive integer, got {chunk_size!r}")
    tokens = array("q", token_ids)
    hashes: list[bytes] = []
    parent = NONE_HASH
    for index in range(len(tokens) // chunk_size):
        digest = hashlib.sha256(parent)
        digest.update(tokens[index * chunk_size : (index + 1) * chunk_size].tobytes())
        digest.update(_extra_bytes(index, cache_salt, lora_name))
        parent = digest.digest()
        hashes.append(parent)
    return hashes


def object_key(model_name: str, world_size: int, rank: int, group_id: int, chunk_hash: bytes, dtype: str = "") -> str:
    """The store key of one (chunk, group, rank) object: distinct per model, KV dtype, TP size and rank and KV
    cache group (as LMCache's keys: one store may serve several deployments)."""
    return f"{model_name}|{dtype}|{world_size}|{rank}|g{group_id}|{chunk_hash.hex()}"
