"""The config resolver's `kv_cache_groups` stage: a case's layer kinds grouped as vLLM plans them.

The grouping itself is the allocator's planner (`reference_impl.kv_cache.kv_cache_planning`, vLLM 0.33's
`get_kv_cache_groups`); this stage builds one representative spec per layer kind, applies the era's order
of warning and error when HMA is disabled (`Era.unify_warns_before_error`), and summarizes the groups for the
case outcome.
"""

from __future__ import annotations

import logging

import torch

from reference_impl.config import messages
from reference_impl.config.eras import ERAS_BY_ID
from reference_impl.kv_cache.kv_cache_interface import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)
from reference_impl.kv_cache.kv_cache_grouping import is_kv_cache_spec_uniform, unify_hybrid_kv_cache_specs
from reference_impl.kv_cache.kv_cache_planning import get_kv_cache_groups, planning_config
from reference_impl.vocabulary import LAYER_KINDS

__all__ = ["LAYER_KINDS", "default_layer_spec", "resolve_groups"]

logger = logging.getLogger(__name__)


def default_layer_spec(kind: str, *, block_size: int = 16, sliding_window: int = 4096,
                       attention_chunk_size: int = 8192) -> KVCacheSpec:
    """A representative spec per layer kind: 8 KV heads x 128 bf16; Mamba state smaller than a page."""
    attn = dict(block_size=block_size, num_kv_heads=8, head_size=128, dtype=torch.bfloat16)
    if kind == "full":
        return FullAttentionSpec(**attn)
    if kind == "sliding_window":
        return SlidingWindowSpec(**attn, sliding_window=sliding_window)
    if kind == "chunked_local":
        return ChunkedLocalAttentionSpec(**attn, attention_chunk_size=attention_chunk_size)
    if kind == "mamba":
        return MambaSpec(block_size=block_size, shapes=((64, 128), (8, 64, 16)), dtypes=(torch.bfloat16, torch.bfloat16))
    raise ValueError(f"unknown layer kind {kind!r}; accepted: {', '.join(LAYER_KINDS)}")


_KINDS = ((ChunkedLocalAttentionSpec, "chunked_local"), (SlidingWindowSpec, "sliding_window"),
          (FullAttentionSpec, "full"), (MambaSpec, "mamba"))


def _spec_kind(spec: KVCacheSpec) -> str:
    if isinstance(spec, UniformTypeKVCacheSpecs):
        spec = spec.first_spec
    return next(kind for cls, kind in _KINDS if isinstance(spec, cls))


def _unify_for_era(specs: dict[str, KVCacheSpec], warns_first: bool, warnings: list[str]) -> None:
    """HMA disabled: promote in place, with the era's order of warning and error.

    Warning first (eras before v0.33): W-U for any non-uniform model, then E_UNIFY_SEED if promotion cannot unify.
    Otherwise (v0.33 on, vLLM's planner as is): E_UNIFY_V033 before any warning; W-U only when a spec changed.
    """
    before = dict(specs)
    if warns_first and not is_kv_cache_spec_uniform(specs):
        logger.warning(messages.W_U)  # the planner logs it only once promotion succeeded; the seed did first
        warnings.append(messages.W_U)
    try:
        unify_hybrid_kv_cache_specs(specs)
    except ValueError:
        raise ValueError(messages.E_UNIFY_SEED if warns_first else messages.E_UNIFY_V033) from None
    if not warns_first and specs != before:
        warnings.append(messages.W_U)


def resolve_groups(layer_kinds: list[str], disable_hma: bool, era: str,
                   warnings: list[str] | None = None) -> tuple[list[dict], list[str]]:
    """The `kv_cache_groups` stage: group layers of the given kinds as vLLM would in `era` (an era id).

    Layers are named "layers.{i}" in input order. Returns (groups, warnings): one dict per group,
    {"kind": the group's spec kind after any promotion, "layers": [layer indices],
     "block_size": tokens per block, "page_size_bytes": bytes per block of the group's layers}.
    Raises ValueError with the era's exact text when HMA is disabled and the specs cannot be unified
    (warnings logged before it stay in the caller's list), and ValueError naming the field for bad input.
    """
    if not isinstance(layer_kinds, list):
        raise ValueError(f"layers must be a list of layer kinds, got {type(layer_kinds).__name__}")
    if not isinstance(disable_hma, bool):
        raise ValueError(f"disable_hma must be a bool, got {disable_hma!r}")
    if era not in ERAS_BY_ID:
        raise ValueError(f"era must be an era id ({', '.join(ERAS_BY_ID)}), got {era!r}")
    specs = {}
    for i, kind in enumerate(layer_kinds):
        if kind not in LAYER_KINDS:
            raise ValueError(f"layers[{i}]: unknown layer kind {kind!r}; accepted: {', '.join(LAYER_KINDS)}")
        specs[f"layers.{i}"] = default_layer_spec(kind)
    warnings = [] if warnings is None else warnings
    if disable_hma:
        _unify_for_era(specs, ERAS_BY_ID[era].unify_warns_before_error, warnings)
    # Promotion is done: the planner groups the (now unified) specs with HMA on, as vLLM continues.
    groups = get_kv_cache_groups(planning_config(), specs)
    summary = [
        {"kind": _spec_kind(g.kv_cache_spec), "layers": [int(n.split(".")[1]) for n in g.layer_names],
         "block_size": g.kv_cache_spec.block_size, "page_size_bytes": g.kv_cache_spec.page_size_bytes}
        for g in groups
    ]
    return summary, warnings
