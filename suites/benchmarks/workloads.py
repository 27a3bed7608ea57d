"""The throughput workloads of the allocator spec (section 9), written once and driven on any target.

Every workload takes an allocator target (harness.targets.allocator.target protocol) and only calls
vLLM-named methods on the objects it builds, so the reference and vLLM run identical work.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
import random
import sys
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from harness.targets.allocator.target import GroupDesc

__all__ = [
    "STREAMS", "StreamConfig", "StreamShape", "FULL_SCALE", "CI_SCALE", "make_stream_manager",
    "make_stream_requests", "run_stream", "mamba_aligned_chunk", "pool_churn", "make_steady_pool", "steady_pairs",
    "make_evict_pool", "evict_all", "has_evict_first", "pool_ops_digest",
    "count_block_ops", "prefill_and_free", "lookup_prompts",
]

BLOCK_SIZE = 16
# Mamba state block of the full + Mamba stream: 34 hash blocks (the size of issue 10's example), so the shared
# 4096-token prefix ends 288 tokens past a Mamba block boundary and only a fine-grained hit reaches it.
MAMBA_BLOCK_SIZE = 544


@dataclass(frozen=True)
class StreamConfig:
    """A request stream's KV cache groups and what the engine does around the allocator for it."""

    groups: tuple[GroupDesc, ...]
    # prefix-cache retention interval; 0 is the engine default (sparse) for hybrid layouts
    retention_interval: int | None = None
    use_eagle: bool = False
    # draft-token slots the scheduler reserves on every allocate_slots call (EAGLE's num_lookahead_tokens)
    num_lookahead_tokens: int = 0
    # the stream opens with each bare shared prefix as a request of its own (a system prompt sent alone)
    prefix_requests: bool = False

    @property
    def mamba_block_size(self) -> int | None:
        """The Mamba group's block size when the layout has one (chunks then end where states are cached)."""
        return next((g.block_size for g in self.groups if g.kind == "mamba"), None)


_SWA = GroupDesc("sliding_window", BLOCK_SIZE, sliding_window=4096)
STREAMS = {
    "full": StreamConfig((GroupDesc("full", BLOCK_SIZE),)),
    "hybrid": StreamConfig((GroupDesc("full", BLOCK_SIZE), _SWA), retention_interval=0),
    # full + SWA under EAGLE: the last matching block is dropped from every hit, 2 draft slots per step
    "hybrid_eagle": StreamConfig((GroupDesc("full", BLOCK_SIZE), _SWA), retention_interval=0, use_eagle=True,
                                 num_lookahead_tokens=2),
    # full + Mamba (align): the Mamba block is larger than the hash block, so vLLM 0.33 enables fine-grained
    # (partial) hash hits; the bare prefixes checkpoint their state at their last hash boundary (4080)
    "full_mamba_partial": StreamConfig((GroupDesc("full", BLOCK_SIZE), GroupDesc("mamba", MAMBA_BLOCK_SIZE)),
                                       retention_interval=0, prefix_requests=True),
}


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


def make_stream_manager(target, config: str, shape: StreamShape):
    """A `KVCacheManager` of `target` laid out as stream `config` (one pool of `shape.num_blocks`)."""
    stream = STREAMS[config]
    return target.make_manager(list(stream.groups), shape.num_blocks, 1 << 20,
                               retention_interval=stream.retention_interval, use_eagle=stream.use_eagle)


def make_stream_requests(target, shape: StreamShape, seed: int = 0, config: str = "full") -> list:
    """The stream's requests (prompt hashing happens here, outside any timed region).

    Request i is shared prefix i mod `num_prefixes` followed by its own tokens; a stream with
    `prefix_requests` first sends every bare prefix as a request of its own.
    """
    prefixes, uniques = _stream_tokens(shape, seed)
    out = []
    if STREAMS[config].prefix_requests:
        out = [target.make_request(f"prefix-{j}", list(p), BLOCK_SIZE) for j, p in enumerate(prefixes)]
    for i in range(shape.num_requests - len(out)):
        out.append(target.make_request(f"req-{i}", [*prefixes[i % shape.num_prefixes], *uniques[i]], BLOCK_SIZE))
    return out


@functools.lru_cache(maxsize=4)
def _stream_tokens(shape: StreamShape, seed: int) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, ...], ...]]:
    """The stream's shared prefixes and per-request unique tokens (drawing them is most of a round's setup,
    so every round and implementation reuses one draw; tuples, so no request can change them)."""
    prefix_count = shape.prefix_tokens * shape.num_prefixes
    draws = randrange_draws(random.Random(seed), 1, 50_000, prefix_count + shape.unique_tokens * shape.num_requests)
    prefixes = tuple(tuple(draws[i:i + shape.prefix_tokens]) for i in range(0, prefix_count, shape.prefix_tokens))
    uniques = tuple(tuple(draws[i:i + shape.unique_tokens])
                    for i in range(prefix_count, len(draws), shape.unique_tokens))
    return prefixes, uniques


def randrange_draws(rng: random.Random, start: int, stop: int, count: int, chunk_words: int = 1 << 16) -> list[int]:
    """`count` values of `rng.randrange(start, stop)`, the very values those calls return in turn, drawn in bulk.

    CPython's `randrange` over a width of k bits takes the top k bits of one 32-bit Mersenne Twister word and
    draws again while they are not below the width; `getrandbits(32 * n)` hands out the next n words, the first
    in the lowest bits. So the words are read in bulk and filtered the same way: the 4.1 million tokens of a
    full-scale stream in about a fifth of the 2 CPU-s their calls took, the workload unchanged
    (tests/benchmarks/test_stream_tokens.py holds the two draws equal).
    """
    width = stop - start
    bits = width.bit_length()
    if not 0 < width < 1 << 32 or array("I").itemsize != 4:
        return [rng.randrange(start, stop) for _ in range(count)]
    shift = 32 - bits
    out: list[int] = []
    while len(out) < count:
        words = array("I", rng.getrandbits(32 * chunk_words).to_bytes(4 * chunk_words, "little"))
        if sys.byteorder != "little":
            words.byteswap()
        out += [value + start for word in words if (value := word >> shift) < width]
    del out[count:]
    return out


def mamba_aligned_chunk(request, start: int, num_new_tokens: int, block_size: int, hash_block_size: int,
                        max_prefill_tokens: int) -> int:
    """How many of `num_new_tokens` prefill tokens from `start` the engine schedules under Mamba "align".

    What vLLM 0.33's scheduler does (no EAGLE drop, no lookahead hashes, no in-chunk checkpoint): Mamba
    state is written only at chunk ends, so a prefill chunk ends on a Mamba block boundary, never runs past
    the last boundary before the prompt's end, stops at the prompt's last hash boundary (the fine-grained
    checkpoint a later prompt extending this one hits) and at the block-floored shared-prefix junction the
    manager reported. The prompt's final chunk is exempt from the block alignment.
    """
    prefill_end = max(request.num_prompt_tokens, request.num_tokens - 1)
    if start >= prefill_end:
        return num_new_tokens
    end = start + num_new_tokens
    if end < prefill_end:
        aligned_end = end // block_size * block_size
        if aligned_end > start or block_size <= max_prefill_tokens:
            end = aligned_end
    # the last block boundary strictly inside the sequence (one token is always left to compute)
    last_cache_position = (request.num_tokens - 1) // block_size * block_size
    tail_boundary = (request.num_prompt_tokens - 1) // hash_block_size * hash_block_size
    junction = request.shared_prefix_boundary
    stops = (
        (start // block_size + 1) * block_size if start % block_size else 0,
        last_cache_position,
        tail_boundary if last_cache_position < tail_boundary < request.num_prompt_tokens else 0,
        start + (junction - start) // block_size * block_size if start < junction < end else 0,
    )
    end = min((s for s in stops if start < s < end), default=end)
    return max(end - start, 0)


def run_stream(manager, requests: list, shape: StreamShape, on_finish: Callable | None = None,
               config: str = "full") -> int:
    """Admit up to `max_concurrent` requests, prefill in chunks, decode `decode_steps` tokens, free.

    Every step starts with `new_step_starts()` where the manager has it, as the engine's scheduler does.
    Stream `config` says the draft slots reserved per call and whether chunks follow Mamba's alignment
    (`mamba_aligned_chunk`).
    A request the manager does not admit waits for the next step. Returns the number of allocate_slots
    calls. `on_finish(request)` runs just before each free.
    """
    stream = STREAMS[config]
    lookahead = stream.num_lookahead_tokens
    mamba_block = stream.mamba_block_size
    hash_block = math.gcd(*(g.block_size for g in stream.groups))
    pending = deque(requests)
    active: list[list] = []
    chunk = shape.prefill_chunk
    steps = shape.decode_steps
    calls = 0
    allocate = manager.allocate_slots
    # A release without per-step bookkeeping (vLLM 0.13) has no new_step_starts: its scheduler calls nothing.
    step = getattr(manager, "new_step_starts", None) or (lambda: None)

    def prefill_tokens(req, start: int) -> int:
        n = min(chunk, req.num_prompt_tokens - start)
        if mamba_block is not None:
            n = mamba_aligned_chunk(req, start, n, mamba_block, hash_block, chunk)
            if n <= 0:
                raise RuntimeError(f"{req.request_id}: no prefill token schedulable from {start}")
        return n

    while pending or active:
        step()
        while pending and len(active) < shape.max_concurrent:
            req = pending.popleft()
            blocks, hit, boundary = manager.get_computed_blocks(req)
            req.shared_prefix_boundary = boundary
            n = prefill_tokens(req, hit)
            calls += 1
            if allocate(req, n, hit, blocks, lookahead) is None:
                # Not admitted this step (Mamba defers a hit on a state cached in the same step): like the
                # scheduler, keep it first in line and stop admitting until the next step.
                if not active:
                    raise RuntimeError(f"allocation failed for {req.request_id}; the pool is sized never to fail")
                pending.appendleft(req)
                break
            req.num_computed_tokens = hit + n
            active.append([req, 0])
        still = []
        for entry in active:
            req = entry[0]
            if req.num_computed_tokens < req.num_prompt_tokens:
                n = prefill_tokens(req, req.num_computed_tokens)
            else:
                if entry[1] == steps:
                    if on_finish is not None:
                        on_finish(req)
                    manager.free(req)
                    continue
                req.append_output_token_ids((req.num_tokens * 31) % 50_000 + 1)
                entry[1] += 1
                n = 1
            if allocate(req, n, 0, None, lookahead) is None:
                raise RuntimeError(f"allocation failed for {req.request_id}; the pool is sized never to fail")
            calls += 1
            req.num_computed_tokens += n
            still.append(entry)
        active = still
    return calls


def stream_tables_digest(target, config: str, shape: StreamShape) -> tuple[str, int]:
    """SHA-256 over every request's final block ids (per group) and the allocate_slots call count."""
    manager = make_stream_manager(target, config, shape)
    digest = hashlib.sha256()
    calls = run_stream(manager, make_stream_requests(target, shape, config=config), shape,
                       on_finish=lambda r: digest.update(repr(manager.get_block_ids(r.request_id)).encode()),
                       config=config)
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
        # one list of blocks, or (vLLM 0.13) one list per KV cache group
        flat = [b for item in blocks for b in (item if isinstance(item, (list, tuple)) else (item,))]
        counts[0] += sum(1 for b in flat if not b.is_null)
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


def has_evict_first(target) -> bool:
    """Whether the target's `BlockPool.free_blocks` takes `evict_first` (vLLM 0.34 and the reference)."""
    return "evict_first" in inspect.signature(target.make_block_pool(2, False, BLOCK_SIZE).free_blocks).parameters


def pool_ops_digest(target, seed: int, evict_first: bool, num_blocks: int = 48, num_ops: int = 600) -> str:
    """SHA-256 over the block ids a random sequence of pool operations hands out, hits and leaves queued.

    The operations (drawn from `seed`, caching on): get_new_blocks of 1..8 blocks; free_blocks of a held
    allocation, tail first or not, some with `evict_first` when asked (every target compared must have it);
    cache_full_blocks of a held allocation or of blocks that are free; a prefix hit (get_cached_block, then
    touch). After each, the free queue from head to tail is digested, and now and then read by walking it
    from its head sentinel.
    """
    rng = random.Random(seed)
    pool = target.make_block_pool(num_blocks, True, BLOCK_SIZE)
    queue = pool.free_block_queue
    digest = hashlib.sha256()
    held: list[list] = []

    def keys(tag: int, n: int) -> list[bytes]:
        return [hashlib.sha256(f"{tag}:{i}".encode()).digest() for i in range(n)]

    for _ in range(num_ops):
        op = rng.random()
        free = pool.get_num_free_blocks()
        if op < 0.35 and free:
            blocks = pool.get_new_blocks(rng.randint(1, min(free, 8)))
            digest.update(repr(("get", [b.block_id for b in blocks])).encode())
            held.append(blocks)
        elif op < 0.6 and held:
            blocks = held.pop(rng.randrange(len(held)))
            if rng.random() < 0.7:
                blocks.reverse()
            # drawn either way, so that the rest of the sequence does not depend on `evict_first`
            first = rng.random() < 0.15
            if evict_first and first:
                pool.free_blocks(blocks, evict_first=True)
            else:
                pool.free_blocks(blocks)
        elif op < 0.75:
            # a held allocation, or blocks that are free (cached while queued: handing them out evicts them)
            blocks = held[rng.randrange(len(held))] if held and rng.random() < 0.8 else \
                queue.get_all_free_blocks()[:rng.randint(1, 4)]
            if blocks and all(b.block_hash is None for b in blocks):
                pool.cache_full_blocks(_HashOnly("r", keys(rng.randrange(6), len(blocks))), blocks, 0,
                                       len(blocks), BLOCK_SIZE, 0)
        elif op < 0.9:
            hit = []
            for key in keys(rng.randrange(6), 8):
                cached = pool.get_cached_block(key, [0])
                if cached is None:
                    break
                hit.append(cached[0])
            digest.update(repr(("hit", [b.block_id for b in hit])).encode())
            if hit:
                pool.touch(hit)
                held.append(hit)
        elif op < 0.95:
            walk, cur, tail = [], queue.fake_free_list_head.next_free_block, queue.fake_free_list_tail
            while cur is not tail:
                walk.append(cur.block_id)
                cur = cur.next_free_block
            digest.update(repr(("walk", walk)).encode())
        digest.update(repr([b.block_id for b in queue.get_all_free_blocks()]).encode())
    return digest.hexdigest()


# --------------------------------------------------------------------------------------- 32k lookup
def prefill_and_free(target, config: str, prompt_tokens: list[int], chunk: int = 8192):
    """A manager in which a 32k prompt was prefilled in chunks of `chunk` and freed."""
    manager = make_stream_manager(target, config, StreamShape(num_blocks=100_000))
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
