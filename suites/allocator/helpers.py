"""Small helpers shared by the allocator scenarios (ids, queue order, driving a request)."""

from __future__ import annotations

__all__ = ["ids", "queue_ids", "prefill", "tables"]


def ids(blocks) -> list[int]:
    """Block ids of a block list."""
    return [b.block_id for b in blocks]


def queue_ids(pool) -> list[int]:
    """Free-queue block ids, head (reused first) to tail."""
    return ids(pool.free_block_queue.get_all_free_blocks())


def prefill(manager, request, chunk: int | None = None, use_hits: bool = True) -> int:
    """Admit `request` (prefix lookup + chunked prefill of the whole prompt); returns the hit length."""
    hit = 0
    blocks = None
    if use_hits:
        blocks, hit, boundary = manager.get_computed_blocks(request)
        request.shared_prefix_boundary = boundary
    remaining = request.num_prompt_tokens - hit
    first = True
    while remaining > 0:
        n = remaining if chunk is None else min(chunk, remaining)
        if first:
            out = manager.allocate_slots(request, n, hit, blocks if hit else None)
            request.num_computed_tokens = hit
            first = False
        else:
            out = manager.allocate_slots(request, n)
        assert out is not None, f"allocation of {n} tokens for {request.request_id} unexpectedly failed"
        request.num_computed_tokens += n
        remaining -= n
    return hit


def tables(manager, request) -> list[list[int]]:
    """The request's block ids per group, as lists."""
    return [list(g) for g in manager.get_block_ids(request.request_id)]
