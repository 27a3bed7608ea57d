"""The throughput workloads of the allocator spec (section 9), written once and driven on any target.

Every workload takes an allocator target (harness.targets.allocator_target protocol) and only calls
vLLM-named methods on the objects it builds, so the reference and vLLM run identical work.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from harness.targets.allocator_target import GroupDesc

__all__ = [
    "STREAM_CONFIGS", "StreamShape", "FULL_SCALE", "CI_SCALE", "make_stream_requests", "run_stream",
    "pool_churn", "make_steady_pool", "steady_pairs", "make_evict_pool", "evict_all", "count_block_ops",
    "prefill_and_free", "lookup_prompts",
]

BLOCK_SIZE = 16
STREAM_CONFIGS = {
    "full": [GroupDesc("full", BLOCK_SIZE)],
    "hybrid": [GroupDesc("full", BLOCK_SIZE), GroupDesc("sliding_window", BLOCK_SIZE, sliding_window=4096)],
}
# retention interval per config: the engine default 0 (sparse) for the hybrid stream
STREAM_RETENTION = {"full": None, "hybrid": 0}


@dataclass(frozen=True)
class StreamShape:
    """Size of the request-stream workload."""

    num_requests: int = 1000
    prefix_tokens: int = 4096
    unique_tokens: int = 4096
    num_prefixes: int = 8
    prefill_chunk: int = 2048
    decode_steps: int = 128
    max_concurrent: int = 32
    num_blocks: int = 100_000


FULL_SCALE = StreamShape()
# Same shape at a tenth of the requests: used when pytest-benchmark does not time (xdist / CI).
CI_SCALE = StreamShape(num_requests=100)


def make_stream_requests(target, shape: StreamShape, seed: int = 0) -> list:
    """The stream's requests (prompt hashing happens here, outside any timed region)."""
    rng = random.Random(seed)
    prefixes = [[rng.randrange(1, 50_000) for _ in range(shape.prefix_tokens)] for _ in range(shape.num_prefixes)]
    out = []
    for i in range(shape.num_requests):
        unique = [rng.randrange(1, 50_000) for _ in range(shape.unique_tokens)]
        out.append(target.make_request(f"req-{i}", prefixes[i % shape.num_prefixes] + unique, BLOCK_SIZE))
    return out


def run_stream(manager, requests: list, shape: StreamShape, on_finish: Callable | None = None) -> int:
    """Admit up to `max_concurrent` requests, prefill in chunks, decode `decode_steps` tokens, free.

    Returns the number of allocate_slots calls. `on_finish(request)` runs just before each free.
    """
    pending = deque(requests)
    active: list[list] = []
    chunk = shape.prefill_chunk
    steps = shape.decode_steps
    calls = 0
    allocate = manager.allocate_slots
    while pending or active:
        while pending and len(active) < shape.max_concurrent:
            req = pending.popleft()
            blocks, hit, boundary = manager.get_computed_blocks(req)
            req.shared_prefix_boundary = boundary
            n = min(chunk, req.num_prompt_tokens - hit)
            if allocate(req, n, hit, blocks) is None:
                raise RuntimeError(f"allocation failed for {req.request_id}; the pool is sized never to fail")
            calls += 1
            req.num_computed_tokens = hit + n
            active.append([req, 0])
        still = []
        for entry in active:
            req = entry[0]
            if req.num_computed_tokens < req.num_prompt_tokens:
                n = min(chunk, req.num_prompt_tokens - req.num_computed_tokens)
            else:
                if entry[1] == steps:
                    if on_finish is not None:
                        on_finish(req)
                    manager.free(req)
                    continue
                req.append_output_token_ids((req.num_tokens * 31) % 50_000 + 1)
                entry[1] += 1
                n = 1
            if allocate(req, n) is None:
                raise RuntimeError(f"allocation failed for {req.request_id}; the pool is sized never to fail")
            calls += 1
            req.num_computed_tokens += n
            still.append(entry)
        active = still
    return calls


def stream_tables_digest(target, config: str, shape: StreamShape) -> tuple[str, int]:
    """SHA-256 over every request's final block ids (per group) and the allocate_slots call count."""
    manager = target.make_manager(STREAM_CONFIGS[config], shape.num_blocks, 1 << 20,
                                  retention_interval=STREAM_RETENTION[config])
    digest = hashlib.sha256()
    calls = run_stream(manager, make_stream_requests(target, shape), shape,
                       on_finish=lambda r: digest.update(repr(manager.get_block_ids(r.request_id)).encode()))
    return digest.hexdigest(), calls


def count_block_ops(block_pool, action: Callable[[], object]) -> int:
    """Blocks allocated + freed (ref decrements) + touched while running `action` (instrumented replay)."""
    counts = [0]
    orig_get, orig_free, orig_touch = block_pool.get_new_blocks, block_pool.free_blocks, block_pool.touch

    def get_new_blocks(n):
        counts[0] += n
        return orig_get(n)

    def free_blocks(blocks):
        blocks = [b for b in blocks if not b.is_null]
        counts[0] += len(blocks)
        return orig_free(blocks)

    def touch(blocks):
        blocks = [b for b in blocks if not b.is_null]
        counts[0] += len(blocks)
        return orig_touch(blocks)

    block_pool.get_new_blocks, block_pool.free_blocks, block_pool.touch = get_new_blocks, free_blocks, touch
    # Managers keep their own reference to the pool object, so instance attributes reach them too.
    try:
        action()
    finally:
        del block_pool.get_new_blocks, block_pool.free_blocks, block_pool.touch
    return counts[0]


# ------------------------------------------------------------------------------------------ BlockPool
def pool_churn(pool, k: int, pairs: int) -> None:
    """`pairs` times: get k blocks, free them tail first."""
    get, free = pool.get_new_blocks, pool.free_blocks
    for _ in range(pairs):
        blocks = get(k)
        blocks.reverse()
        free(blocks)


class _HashOnly:
    """The minimum of a request `cache_full_blocks` reads."""

    def __init__(self, request_id: str, block_hashes: list[bytes]):
        self.request_id = request_id
        self.block_hashes = block_hashes


def _cache_blocks(pool, blocks, tag: int) -> None:
    hashes = [hashlib.sha256(f"{tag}:{i}".encode()).digest() for i in range(len(blocks))]
    pool.cache_full_blocks(_HashOnly(f"r{tag}", hashes), blocks, 0, len(blocks), pool.hash_block_size, 0)


def make_steady_pool(target, num_blocks: int = 100_000, k: int = 16):
    """Caching on, a FIFO ring holding 50% of the pool in k-block cached allocations."""
    pool = target.make_block_pool(num_blocks, True, BLOCK_SIZE)
    ring = deque()
    tag = 0
    while (len(ring) + 1) * k <= (num_blocks - 1) // 2:
        blocks = pool.get_new_blocks(k)
        _cache_blocks(pool, blocks, tag)
        tag += 1
        ring.append(blocks)
    return pool, ring


def steady_pairs(pool, ring, k: int, pairs: int) -> None:
    """Each pair allocates k blocks and frees the oldest k-block allocation (tail first)."""
    get, free = pool.get_new_blocks, pool.free_blocks
    for _ in range(pairs):
        ring.append(get(k))
        old = ring.popleft()
        old.reverse()
        free(old)


def make_evict_pool(target, num_blocks: int = 100_000):
    """Every usable block cached and free."""
    pool = target.make_block_pool(num_blocks, True, BLOCK_SIZE)
    blocks = pool.get_new_blocks(num_blocks - 1)
    _cache_blocks(pool, blocks, 0)
    pool.free_blocks(blocks)
    return pool


def evict_all(pool, k: int = 16) -> int:
    """get_new_blocks(k) until the pool is empty; every block is evicted as it is handed out."""
    n = 0
    get = pool.get_new_blocks
    while pool.get_num_free_blocks() >= k:
        get(k)
        n += k
    return n


# --------------------------------------------------------------------------------------- 32k lookup
def prefill_and_free(target, config: str, prompt_tokens: list[int], chunk: int = 8192):
    """A manager in which a 32k prompt was prefilled in chunks of `chunk` and freed."""
    manager = target.make_manager(STREAM_CONFIGS[config], 100_000, 1 << 20,
                                  retention_interval=STREAM_RETENTION[config])
    req = target.make_request("warm", prompt_tokens, BLOCK_SIZE)
    while req.num_computed_tokens < req.num_prompt_tokens:
        n = min(chunk, req.num_prompt_tokens - req.num_computed_tokens)
        manager.allocate_slots(req, n)
        req.num_computed_tokens += n
    manager.free(req)
    return manager


def lookup_prompts(target, length: int = 32_768, seed: int = 1):
    """(prompt tokens, the identical prompt request, an unrelated prompt request)."""
    rng = random.Random(seed)
    tokens = [rng.randrange(1, 50_000) for _ in range(length)]
    other = [rng.randrange(1, 50_000) for _ in range(length)]
    return tokens, target.make_request("hit", tokens, BLOCK_SIZE), target.make_request("miss", other, BLOCK_SIZE)
