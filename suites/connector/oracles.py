"""Oracles independent of the connector: the expected hit, the bytes a request needs, and canaries.

The hit oracle works from first principles: a hit of L tokens is servable when every full-attention
group holds every chunk before L, every sliding-window group holds each chunk that overlaps the
window [L - window + 1, L), and every Mamba group holds the state exactly at L.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_impl.engine.content import CANARY_VALUE
from reference_impl.kv_cache.kv_cache_interface import (AttentionSpec, ChunkedLocalAttentionSpec, MambaSpec,
                                                       SlidingWindowSpec, cdiv)


def attention_reads_from(spec, end: int) -> int:
    """The first token position the token at `end` reads in an attention group of `spec`: the window's start
    (sliding window), its attention chunk's start (chunked local attention), else 0 (full attention)."""
    if isinstance(spec, SlidingWindowSpec):
        return max(0, end - spec.sliding_window + 1)
    if isinstance(spec, ChunkedLocalAttentionSpec):
        return end // spec.attention_chunk_size * spec.attention_chunk_size
    return 0


def oracle_hit_tokens(specs, present: dict[int, set[int]], chunk: int, num_tokens: int) -> int:
    """Largest chunk-aligned L <= num_tokens - 1 servable by every group, given present chunk indices."""
    for end in range((num_tokens - 1) // chunk * chunk, 0, -chunk):
        last = end // chunk - 1
        ok = True
        for gid, spec in enumerate(specs):
            have = present.get(gid, set())
            if isinstance(spec, MambaSpec):
                needed = [last]
            else:
                needed = range(attention_reads_from(spec, end) // chunk, last + 1)
            if any(j not in have for j in needed):
                ok = False
                break
        if ok:
            return end
    return 0


@dataclass(frozen=True)
class Mismatch:
    """First block that differs from the oracle."""

    rank: int
    layer: str
    block: int
    position: int

    def __str__(self) -> str:
        where = "Mamba state" if self.position < 0 else f"token position {self.position}"
        return f"rank {self.rank} layer {self.layer} block {self.block} ({where}) differs from the content oracle"


def first_kv_mismatch(engine, tokens, table: tuple[list[int], ...], start: int, end: int,
                      group_ids=None) -> Mismatch | None:
    """The first needed block in [start, end) (and the Mamba state at `end`) that differs from the oracle."""
    for worker in engine.workers:
        for gid, group in enumerate(engine.kv_cache_config.kv_cache_groups):
            spec = group.kv_cache_spec
            if (group_ids is not None and gid not in group_ids) or not getattr(spec, "prefix_cacheable", True):
                continue  # scratch groups hold nothing a request needs back
            ids = table[gid]
            for layer in group.layer_names:
                view = worker.kv_caches[layer]
                if isinstance(spec, MambaSpec):
                    pos = cdiv(end, spec.block_size) - 1
                    if end % spec.block_size == 0 and pos < len(ids) and ids[pos]:
                        want = worker.expected_state(layer, tokens[:end])
                        if not all(torch.equal(v[ids[pos]], w) for v, w in zip(view, want)):
                            return Mismatch(worker.rank, layer, ids[pos], -1)
                    continue
                first = max(start, attention_reads_from(spec, end))
                bs = spec.block_size
                for b in range(first // bs, cdiv(end, bs)):
                    lo, hi = max(first, b * bs), min(end, (b + 1) * bs)
                    block = ids[b] if b < len(ids) else 0
                    want = worker.expected_kv(layer, tokens[lo:hi], range(lo, hi))
                    if block == 0 or not torch.equal(view[block, lo - b * bs : hi - b * bs], want):
                        return Mismatch(worker.rank, layer, block, lo)
    return None


def rank_whose_kv(engine, worker, error, tokens) -> int | None:
    """The other rank of `engine` whose oracle KV equals what `worker` wrongly read (`error`, one of its
    `read_errors` of a request of `tokens`, its block still holding the bytes read), or None: a rank that read
    another rank's shard (keys without the TP rank) is told from KV that is merely wrong."""
    if error.position < 0 or not error.block or error.position >= len(tokens):
        return None
    block_size = worker.kv_cache_config.layer_specs[error.layer].block_size
    got = worker.kv_caches[error.layer][error.block, error.position % block_size]
    span = range(error.position, error.position + 1)
    for other in engine.workers:
        if other.rank != worker.rank and torch.equal(got, other.expected_kv(error.layer, tokens[error.position:][:1],
                                                                            span)[0]):
            return other.rank
    return None


def owned_or_cached_blocks(engine) -> set[int]:
    """Blocks some request holds or the prefix cache keeps (their bytes are live)."""
    live = set()
    for req_id, request in engine.scheduler.requests.items():
        if engine.manager.coordinator.has_request(req_id):
            for ids in engine.manager.get_block_ids(req_id):
                live.update(ids)
    for block in engine.manager.block_pool.blocks:
        if block.block_hash is not None:
            live.add(block.block_id)
    live.discard(0)
    return live


def fill_canaries(engine, blocks, worker=None) -> None:
    """Write the canary value into `blocks` (and always block 0) of every layer on every rank, or on
    `worker`'s rank only."""
    ids = torch.tensor(sorted(set(blocks) | {0}), dtype=torch.long)
    for tensor in _layer_tensors(engine, worker):
        tensor.index_fill_(0, ids, CANARY_VALUE)


def broken_canaries(engine, blocks) -> list[str]:
    """Where a canary-filled block was overwritten: 'rank r layer L block b'."""
    ids = torch.tensor(sorted(set(blocks) | {0}), dtype=torch.long)
    broken = []
    for worker in engine.workers:
        for name, view in worker.kv_caches.items():
            for tensor in view if isinstance(view, list) else [view]:
                intact = (tensor.index_select(0, ids) == CANARY_VALUE).reshape(len(ids), -1).all(dim=1)
                broken += [f"rank {worker.rank} layer {name} block {int(ids[i])}" for i in (~intact).nonzero().flatten()]
    return broken


def fence_evidence(broken: list[str], what: str) -> str:
    """Evidence for broken canaries that names the real cause: a write into the null block is reported as
    such, whatever other blocks the fence covered."""
    null = [b for b in broken if b.endswith(" block 0")]
    if null:
        return f"the null block (block 0) was written: {null[:1]}"
    return f"{what}: {broken[:1]}"


def all_blocks(engine) -> set[int]:
    """Every block id except the null block."""
    return set(range(1, engine.kv_cache_config.num_blocks))


def attention_group_ids(engine) -> list[int]:
    """Groups whose spec is attention."""
    return [g for g, grp in enumerate(engine.kv_cache_config.kv_cache_groups)
            if isinstance(grp.kv_cache_spec, AttentionSpec)]


def _layer_tensors(engine, only=None):
    for worker in engine.workers if only is None else [only]:
        for view in worker.kv_caches.values():
            yield from (view if isinstance(view, list) else [view])


def snapshot_blocks(engine, blocks) -> list:
    """Copies of `blocks` (plus block 0) in every layer tensor, for `restore_blocks`."""
    ids = torch.tensor(sorted(set(blocks) | {0}), dtype=torch.long)
    return [(tensor, ids, tensor.index_select(0, ids)) for tensor in _layer_tensors(engine)]


def restore_blocks(engine, snapshot) -> None:
    """Put back what `snapshot_blocks` saved."""
    for tensor, ids, values in snapshot:
        tensor.index_copy_(0, ids, values)


class Exposure:
    """What the engines ever showed the connectors, the upper bound of anything a store can hold.

    After every step, for every scheduled request: each block whose tokens were computed and which was in
    the request's table (non-null) for group g, keyed by (g, the token prefix up to the block's end); and
    for Mamba groups the state at the step's end when it lies on a state boundary. Also each computed block of
    the request that the engine's prefix cache holds (under the request's block hash) although the table does
    not (a null block out of the window): the scheduler binds every connector to its KV cache manager, and a
    connector may copy such a cached block (SimpleCPUOffloadConnector stores "the GPU block still cached under
    this group's block hash"). A connector can only serve KV that it could have copied while it was exposed,
    whatever its chunking or keys.
    """

    def __init__(self):
        self.blocks: set[tuple[int, int]] = set()
        self.states: set[tuple[int, int]] = set()
        self._seen: set[tuple] = set()

    @staticmethod
    def key(tokens, end: int) -> int:
        """In-process key of the token prefix of length `end`."""
        return hash(tuple(tokens[:end]))

    def observer(self, engine):
        """An `EngineCore.observers` callback recording this engine's exposure."""
        specs = [g.kv_cache_spec for g in engine.kv_cache_config.kv_cache_groups]

        def observe(so) -> None:
            if engine.scheduler.connector is None:
                return  # a detached run: the connector saw none of it
            for req_id in so.num_scheduled_tokens:
                request = engine.scheduler.requests.get(req_id)
                if request is None or not engine.manager.coordinator.has_request(req_id):
                    continue
                computed, tokens = request.num_computed_tokens, request.all_token_ids
                for gid, (ids, spec) in enumerate(zip(engine.manager.get_block_ids(req_id), specs)):
                    bs = spec.block_size
                    # Block i of an attention group holds tokens [i*bs, (i+1)*bs); of a Mamba group (align
                    # mode) the state after (i+1)*bs tokens, once that many are computed.
                    into = self.states if isinstance(spec, MambaSpec) else self.blocks
                    for index in range(min(len(ids), computed // bs)):
                        marker = (req_id, request.num_preemptions, gid, index, ids[index])
                        if ids[index] and marker not in self._seen:
                            self._seen.add(marker)
                            into.add((gid, self.key(tokens, (index + 1) * bs)))
                    pool = engine.manager.block_pool
                    hashes = pool.hashes_at(request, bs)
                    for index in range(min(len(ids), computed // bs, len(hashes))):
                        marker = (req_id, request.num_preemptions, gid, index, "cached")
                        if not ids[index] and marker not in self._seen and pool.get_cached_block(hashes[index], [gid]):
                            self._seen.add(marker)
                            into.add((gid, self.key(tokens, (index + 1) * bs)))

        return observe

    def unservable(self, engine, tokens, end: int) -> str | None:
        """Why a hit ending at `end` cannot be served from anything ever exposed (None: it can). `tokens` may run
        past `end`: an attention hit that ends inside a block (legal: vLLM's scheduler takes it) is served from
        the whole block, exposed under the prefix up to the block's end; a Mamba group restores the state at `end`."""
        for gid, group in enumerate(engine.kv_cache_config.kv_cache_groups):
            spec = group.kv_cache_spec
            if not getattr(spec, "prefix_cacheable", True):
                continue
            bs = spec.block_size
            if isinstance(spec, MambaSpec) and end % bs:
                return f"Mamba group {gid} has no state boundary at {end} (block size {bs})"
            if isinstance(spec, MambaSpec):
                if (gid, self.key(tokens, end)) not in self.states:
                    return (f"Mamba group {gid} never held the state after exactly {end} tokens "
                            "(no step ended there while the connector watched)")
                continue
            for index in range(attention_reads_from(spec, end) // bs, -(-end // bs)):
                if (gid, self.key(tokens, (index + 1) * bs)) not in self.blocks:
                    kind = "sliding-window" if isinstance(spec, SlidingWindowSpec) else \
                        "chunked-local" if isinstance(spec, ChunkedLocalAttentionSpec) else "full-attention"
                    return (f"{kind} group {gid} never exposed tokens {index * bs}-{(index + 1) * bs - 1} "
                            "(their block was null or not computed whenever the connector could copy it)")
        return None


def canary_rows(engine, table: tuple[list[int], ...], start: int, end: int) -> list[str]:
    """Where blocks of `table` holding tokens [start, end) (and the Mamba state at `end`) carry a token row
    (or a state) made entirely of the canary value: bytes copied from the null block."""
    found = []
    for worker in engine.workers:
        for gid, group in enumerate(engine.kv_cache_config.kv_cache_groups):
            spec = group.kv_cache_spec
            bs = spec.block_size
            ids = table[gid]
            if isinstance(spec, MambaSpec):
                pos = end // bs - 1
                blocks = [ids[pos]] if end % bs == 0 and 0 <= pos < len(ids) and ids[pos] else []
            else:
                blocks = [b for b in ids[start // bs: cdiv(end, bs)] if b]
            for layer in group.layer_names[:1]:
                view = worker.kv_caches[layer]
                for block in blocks:
                    parts = view if isinstance(view, list) else [view[block].reshape(bs, -1)]
                    if isinstance(view, list):
                        hit = any(bool((t[block] == CANARY_VALUE).all()) for t in parts)
                    else:
                        hit = bool((parts[0] == CANARY_VALUE).all(dim=1).any())
                    if hit:
                        found.append(f"rank {worker.rank} group {gid} layer {layer} block {block}")
    return found
