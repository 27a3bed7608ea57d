"""The messages HiSparse's allocator side hands to the worker (vLLM: `vllm.v1.hisparse.types`).

The scheduler decides which pages move between the device-resident groups and the host pool; the worker
only executes. These frozen records are that hand-off: page copies (spills and restores), row mirrors
(the host rows a step's freshly written device rows must be copied to) and residency updates (which
device block each resident page is read from now).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "ACTIVE_TAIL_PAGES",
    "SparseKVOffloadCommand",
    "SparseKVPageTransfer",
    "SparseKVResidencyUpdate",
    "SparseKVRowMirror",
]

#: Resident pages this close to the end of a request's table are never released: a step in flight may
#: still be writing them, so handing their blocks out could let a new owner overwrite live KV.
ACTIVE_TAIL_PAGES = 2


@dataclass(frozen=True)
class SparseKVPageTransfer:
    """One logical page copied between its host block and its device-resident blocks (one per resident
    group). `after_forward`: run after the step's forward pass (a write-back of a page that step sealed);
    `restore`: host -> device (an imported page made resident again) instead of device -> host."""

    transfer_id: int
    host_block_id: int
    resident_block_ids: tuple[int, ...]
    after_forward: bool
    restore: bool = False


@dataclass(frozen=True)
class SparseKVRowMirror:
    """`num_rows` consecutive rows written on the device (starting at `source_starts`, one per resident
    group, in rows) that must also land in the host pool at row `destination_start`."""

    source_starts: tuple[int, ...]
    destination_start: int
    num_rows: int


@dataclass(frozen=True)
class SparseKVResidencyUpdate:
    """For the listed `pages` of one request, the device block each resident group reads it from
    (`block_ids[group][i]` for `pages[i]`); the null block id means the page is read from the host."""

    pages: list[int]
    block_ids: tuple[list[int], ...]


@dataclass
class SparseKVOffloadCommand:
    """The page transfers the scheduler planned for one model step."""

    page_transfers: list[SparseKVPageTransfer]
