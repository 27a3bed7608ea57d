"""Oracles independent of the connector: the expected hit, the bytes a request needs, and canaries.

The hit oracle works from first principles: a hit of L tokens is servable when every full-attention
group holds every chunk before L, every sliding-window group holds each chunk that overlaps the
window [L - window + 1, L), and every Mamba group holds the state exactly at L.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from reference_impl.engine.content import CANARY_VALUE
from reference_impl.kv_cache.specs import AttentionSpec, MambaSpec, SlidingWindowSpec, cdiv


def oracle_hit_tokens(specs, present: dict[int, set[int]], chunk: int, num_tokens: int) -> int:
    """Largest chunk-aligned L <= num_tokens - 1 servable by every group, given present chunk indices."""
    for end in range((num_tokens - 1) // chunk * chunk, 0, -chunk):
        last = end // chunk - 1
        ok = True
        for gid, spec in enumerate(specs):
            have = present.get(gid, set())
            if isinstance(spec, SlidingWindowSpec):
                needed = range(max(0, end - spec.sliding_window + 1) // chunk, last + 1)
            elif isinstance(spec, MambaSpec):
                needed = [last]
            else:
                needed = range(0, last + 1)
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
                first = start
                if isinstance(spec, SlidingWindowSpec):
                    first = max(start, end - spec.sliding_window + 1)
                bs = spec.block_size
                for b in range(first // bs, cdiv(end, bs)):
                    lo, hi = max(first, b * bs), min(end, (b + 1) * bs)
                    block = ids[b] if b < len(ids) else 0
                    want = worker.expected_kv(layer, tokens[lo:hi], range(lo, hi))
                    if block == 0 or not torch.equal(view[block, lo - b * bs : hi - b * bs], want):
                        return Mismatch(worker.rank, layer, block, lo)
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


def fill_canaries(engine, blocks) -> None:
    """Write the canary value into `blocks` (and always block 0) of every layer on every rank."""
    ids = torch.tensor(sorted(set(blocks) | {0}), dtype=torch.long)
    for tensor in _layer_tensors(engine):
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


def all_blocks(engine) -> set[int]:
    """Every block id except the null block."""
    return set(range(1, engine.kv_cache_config.num_blocks))


def attention_group_ids(engine) -> list[int]:
    """Groups whose spec is attention."""
    return [g for g, grp in enumerate(engine.kv_cache_config.kv_cache_groups)
            if isinstance(grp.kv_cache_spec, AttentionSpec)]


def _layer_tensors(engine):
    for worker in engine.workers:
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
