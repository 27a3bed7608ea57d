"""What one vLLM release's allocator (`v1/core`) offers: its capability table, read from the release itself
(or from any implementation that keeps vLLM's modules: the reference is probed the same way, and has them all).

A conformance check that needs an API or a feature the release under test lacks is not a failure of that
release: it is "N/A on X.Y.Z: reason" (a skip with that reason), so a clean run on any supported release is
green and `kvconform diff` of two releases' runs lists only what changed in behaviour.

Each capability is probed from the installed release's own code (a constructor parameter, a dataclass
field, a method, a class), never from a version number or a target's name, so a release kvconform has never
seen gets a correct table too. The modules come from the target's module map (`ReleaseModules`). An allocator
shape of `reference_impl/kv_cache/release.py` that one name in vLLM's code shows is a row here by that name
(`Shape.seen_at`), so a new shape is declared there alone.
`docs/allocator-releases.md` lists the table for the releases checked by hand (0.13.0 to 0.34.0).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace

__all__ = ["Capability", "CAPABILITIES", "PROBED_MODULES", "ReleaseModules", "probe_capabilities",
           "not_applicable", "fields_of"]


@dataclass(frozen=True)
class Capability:
    """One allocator feature: how to see it in a release, and what a release without it lacks."""

    name: str
    lacks: str  # completes "N/A on X.Y.Z: ..." for a release without it
    probe: Callable[[dict], bool]


def _params(obj) -> frozenset[str]:
    try:
        return frozenset(inspect.signature(obj).parameters)
    except (TypeError, ValueError):
        return frozenset()


def fields_of(cls) -> frozenset[str]:
    """A dataclass's fields, or a msgspec Struct's (vLLM's KV cache events)."""
    if dataclasses.is_dataclass(cls):
        return frozenset(f.name for f in dataclasses.fields(cls))
    return frozenset(getattr(cls, "__struct_fields__", ()))


#: The short names the probes read -> vLLM's module name (a key of a target's module map).
PROBED_MODULES = {"iface": "v1.kv_cache_interface", "pool": "v1.core.block_pool", "manager": "v1.core.kv_cache_manager",
                  "coordinator": "v1.core.kv_cache_coordinator", "utils": "v1.core.kv_cache_utils",
                  "events": "distributed.kv_events", "hisparse_layout": "v1.hisparse.layout",
                  "hisparse_coordinator": "v1.hisparse.coordinator", "hisparse_backend": "v1.hisparse.backend",
                  "platforms": "platforms", "planning": "v1.core.kv_cache_planning",
                  "stm": "v1.core.single_type_kv_cache_manager",
                  "kv_tensors": "kvconform.kv_cache_tensors", "era_groups": "kvconform.kv_cache_groups"}


class ReleaseModules(Mapping):
    """The modules a target's module map names, by the probes' short names (`probed`: short name -> vLLM's
    module name; the allocator's `PROBED_MODULES` unless given), imported on first read; None for one the map
    does not name or that does not import on this machine."""

    def __init__(self, module_map: Mapping[str, str], probed: Mapping[str, str] = PROBED_MODULES) -> None:
        self._map = module_map
        self._probed = probed
        self._loaded: dict[str, ModuleType | None] = {}

    def __getitem__(self, key: str) -> ModuleType | None:
        if key not in self._loaded:
            path = self._map.get(self._probed[key])
            try:
                self._loaded[key] = importlib.import_module(path) if path else None
            except Exception:  # absent, or present but not importable on this machine
                self._loaded[key] = None
        return self._loaded[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._probed)

    def __len__(self) -> int:
        return len(self._probed)


def _has(module, *names: str) -> bool:
    return module is not None and all(hasattr(module, name) for name in names)


#: What completes a reference extension's "N/A" line: kvconform's own code, which vLLM has no counterpart of.
_EXTENSION = "kvconform's reference extension; vLLM has no counterpart"


def _returns_boundary(mods: dict) -> bool:
    # 2-tuple (blocks, hit tokens) before the shared-prefix boundary was added, then a 3-tuple.
    annotation = inspect.signature(mods["manager"].KVCacheManager.get_computed_blocks).return_annotation
    return isinstance(annotation, str) and annotation.replace(" ", "").count(",") >= 2 \
        or getattr(annotation, "__args__", None) is not None and len(annotation.__args__) >= 3


def _uncached_pool_reuses_freed_first(mods: dict) -> bool:
    # Behaviour, not a method name: 0.13-0.20 append every freed block to the tail, 0.23 too unless the caller
    # passes prepend=True, and 0.27 prepends unhashed blocks only while caching is on ("when caching is disabled
    # we always append", block_pool.py); the checks that need LIFO reuse watch a pool without caching.
    pool = mods["pool"].BlockPool(4, False, 16)
    freed = pool.get_new_blocks(2)
    pool.free_blocks(freed)
    return pool.get_new_blocks(1)[0].block_id in {block.block_id for block in freed}


def _hashes_mamba_align_at_gcd(m) -> bool:
    """Whether the release's `resolve_kv_cache_block_sizes` hashes a model of full attention in blocks of 16 beside
    a Mamba 'align' group in blocks of 256 (the cache block being 16) at their GCD, 16: it takes such a Mamba
    group for an 'align' one. vLLM 0.20-0.27 take a Mamba group whose block is not `cache_config.block_size` for
    one outside 'align' mode and hash at the scheduler block (256), because their config code makes an 'align'
    group's block the cache block (`Platform._align_hybrid_block_size`: `mamba_block_size = block_size`). The
    configs are plain namespaces holding only what the function reads; the specs are the release's own."""
    import torch  # only when probed: the capability table itself stays import-light

    iface = m["iface"]
    utils = m.get("kv_utils") or m["utils"]
    full = iface.FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.float16)
    mamba = iface.MambaSpec(block_size=256, shapes=((4, 8),), dtypes=(torch.float16,), mamba_cache_mode="align")
    groups = [iface.KVCacheGroupSpec(["model.layers.0.full"], full),
              iface.KVCacheGroupSpec(["model.layers.1.mamba"], mamba)]
    cache = SimpleNamespace(block_size=16, enable_prefix_caching=True, hash_block_size=None,
                            prefix_match_unit=None, mamba_cache_mode="align")
    parallel = SimpleNamespace(decode_context_parallel_size=1, prefill_context_parallel_size=1)
    vllm_config = SimpleNamespace(cache_config=cache, parallel_config=parallel, kv_transfer_config=object())
    _, hash_block_size = utils.resolve_kv_cache_block_sizes(
        SimpleNamespace(kv_cache_groups=groups), vllm_config)
    return hash_block_size == 16


def _seen_at(module: str, path: str) -> Callable[[dict], bool]:
    """A probe: whether the release's `module` (a value of PROBED_MODULES) has the attribute `path` ('A.b')."""
    short = next((name for name, probed in PROBED_MODULES.items() if probed == module), None)
    if short is None:
        raise ValueError(f"Shape.seen_at: module {module!r} is not one the capabilities probe (PROBED_MODULES: "
                         f"{', '.join(PROBED_MODULES.values())})")

    def probe(m) -> bool:
        obj = m.get(short)
        for name in path.split("."):
            if obj is None or not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return probe


def _shape_capabilities() -> list[Capability]:
    """A capability for each allocator shape `reference_impl.kv_cache.release` says one name in vLLM's code shows,
    probed by that name (never by the shape's first era)."""
    from reference_impl.kv_cache.release import SHAPES

    return [Capability(shape.capability, shape.lacks, _seen_at(*shape.seen_at.split(":", 1)))
            for shape in SHAPES if shape.capability is not None]


# name -> Capability; `mods` holds the release's modules by the short names of PROBED_MODULES (None, or no
# entry, for one the release lacks).
CAPABILITIES: dict[str, Capability] = {c.name: c for c in (
    Capability("scheduler_block_size", "KVCacheManager takes no scheduler_block_size (hits align at the "
               "groups' LCM, and each group caches every full block, not rounded down to a scheduler block)",
               lambda m: "scheduler_block_size" in _params(m["manager"].KVCacheManager)),
    # The token budget that bounds a recycling-aware group's (sliding window, chunked local) blocks per request:
    # 0.20.0 - 0.24.0 take it as max_num_batched_tokens (one batch in flight), 0.27.0+ as max_in_flight_tokens
    # (every concurrent batch's tokens; the same number with one batch in flight).
    Capability("max_in_flight_tokens", "KVCacheManager takes no max_in_flight_tokens / max_num_batched_tokens "
               "(no token budget bounds a sliding-window request's blocks)",
               lambda m: bool({"max_in_flight_tokens", "max_num_batched_tokens"}
                              & _params(m["manager"].KVCacheManager))),
    Capability("hash_lookahead", "KVCacheManager takes no num_hash_lookahead_tokens (block hashes cover "
               "only their own block)",
               lambda m: "num_hash_lookahead_tokens" in _params(m["manager"].KVCacheManager)),
    Capability("dcp", "KVCacheManager takes no dcp_world_size",
               lambda m: "dcp_world_size" in _params(m["manager"].KVCacheManager)),
    Capability("hybrid_dcp", "HybridKVCacheCoordinator refuses decode context parallelism (\"DCP not support "
               "hybrid attn now.\")",
               lambda m: "DCP not support hybrid attn" not in inspect.getsource(m["coordinator"].HybridKVCacheCoordinator)),
    Capability("group_block_sizes", "the coordinator has no group_block_sizes (each group's block span as "
               "allocated, after decode/prefill context parallelism)",
               lambda m: "group_block_sizes" in inspect.getsource(m["coordinator"].KVCacheCoordinator.__init__)),
    Capability("retention_interval", "KVCacheConfig has no prefix_cache_retention_interval (sliding-window "
               "and Mamba groups cache every block)",
               lambda m: "prefix_cache_retention_interval" in fields_of(m["iface"].KVCacheConfig)),
    Capability("shared_prefix_boundary", "get_computed_blocks returns (blocks, hit tokens) without the "
               "shared-prefix boundary", _returns_boundary),
    Capability("external_computed_tokens", "allocate_slots takes no num_external_computed_tokens",
               lambda m: "num_external_computed_tokens" in _params(m["manager"].KVCacheManager.allocate_slots)),
    Capability("reserved_blocks", "allocate_slots takes no reserved_blocks / full_sequence_must_fit",
               lambda m: {"reserved_blocks", "full_sequence_must_fit"}
               <= _params(m["manager"].KVCacheManager.allocate_slots)),
    Capability("block_ids_by_group", "KVCacheBlocks.get_block_ids takes no group_ids",
               lambda m: "group_ids" in _params(m["manager"].KVCacheBlocks.get_block_ids)),
    # 0.20 and 0.30 hash a LoRA adapter's name and a cache salt as bare strings; 0.31+ as tagged tuples (the
    # exact hashes the checks compare with an independent oracle).
    Capability("tagged_extra_keys", "block hashes take a LoRA adapter's name and a cache salt untagged (no "
               "(\"lora\", name, path) / (\"cache_salt\", salt) extra keys)",
               lambda m: '("cache_salt"' in inspect.getsource(m["utils"])),
    # 0.20 and 0.23 name a coarser group's block by its fine hashes joined; 0.24+ by the last one.
    Capability("coarse_hash_last_fine", "a coarser group's block hash is its fine hashes joined "
               "(BlockHashListWithBlockSize), not the last of them",
               lambda m: m["utils"].BlockHashListWithBlockSize([b"a" * 32, b"b" * 32], 4, 8)[0] == b"b" * 32),
    Capability("unhashed_lifo", "freed blocks of a pool without prefix caching join the tail of the free "
               "queue (they are not reused first)", _uncached_pool_reuses_freed_first),
    Capability("default_none_hash_seed", "NONE_HASH is random per process unless PYTHONHASHSEED is set (no "
               "DEFAULT_NONE_HASH_SEED)",
               lambda m: hasattr(m["utils"], "DEFAULT_NONE_HASH_SEED")),
    Capability("several_group_types", "HybridKVCacheCoordinator takes one full-attention spec plus one other type "
               "of group only",
               lambda m: "exactly one other type" not in inspect.getsource(
                   m["coordinator"].HybridKVCacheCoordinator)),
    Capability("new_step_starts", "KVCacheManager has no new_step_starts (no per-step bookkeeping)",
               lambda m: hasattr(m["manager"].KVCacheManager, "new_step_starts")),
    Capability("remove_skipped_blocks", "KVCacheManager has no remove_skipped_blocks",
               lambda m: hasattr(m["manager"].KVCacheManager, "remove_skipped_blocks")),
    Capability("connector_lookup", "KVCacheManager has no get_computed_blocks_for_connector",
               lambda m: hasattr(m["manager"].KVCacheManager, "get_computed_blocks_for_connector")),
    Capability("unpin_blocks", "BlockPool has no unpin_blocks",
               lambda m: hasattr(m["pool"].BlockPool, "unpin_blocks")),
    Capability("emit_cached_block_events", "BlockPool has no emit_cached_block_events (hits are not reported)",
               lambda m: hasattr(m["pool"].BlockPool, "emit_cached_block_events")),
    # 0.24 and 0.25 have BlockPool.cache_partial_block but no coordinator that looks partial hits up.
    Capability("partial_prefix_hits", "no fine-grained prefix hits (BlockPool.cache_partial_block, "
               "KVCacheManager.take_kv_cache_block_copies and the coordinator's enable_partial_hash_hits)",
               lambda m: hasattr(m["pool"].BlockPool, "cache_partial_block")
               and hasattr(m["manager"].KVCacheManager, "take_kv_cache_block_copies")
               and "enable_partial_hash_hits" in inspect.getsource(m["coordinator"].HybridKVCacheCoordinator)),
    Capability("kv_event_group_idx", "BlockStored/BlockRemoved carry no group_idx",
               lambda m: m.get("events") is not None and "group_idx" in fields_of(m["events"].BlockStored)),
    Capability("rswa", "no RSWASpec (reverse sliding window)", lambda m: hasattr(m["iface"], "RSWASpec")),
    Capability("mamba_align", "MambaSpec has no mamba_cache_mode (no prefix caching of Mamba states)",
               lambda m: "mamba_cache_mode" in fields_of(m["iface"].MambaSpec)),
    # The checkpoints of spec section 4.5 sit at positions the backend's export alignment allows; a MambaSpec with
    # num_prefill_checkpoint_blocks but no prefill_checkpoint_alignment reserves a checkpoint only below a chunk
    # that ends off a block boundary, keyed at that block's end, with none of the position rules the checks assert
    # (the scenarios' alignment could not even be configured).
    # A Mamba 'align' group with a block of its own beside smaller attention blocks: from 0.28.0 the allocator
    # (`resolve_kv_cache_block_sizes`) hashes such a model at the GCD of the group blocks, where 0.15.0 - 0.27.0
    # take the group for one outside 'align' mode. This row says what the allocator does when handed that layout;
    # no release's config builds it: the platform's block-size update sets `mamba_block_size = block_size` in
    # 'align' mode (0.20.0 `platforms/interface.py` l. 502-613; 0.32.0 `Platform._align_hybrid_block_size`,
    # l. 1102-1103, run for every hybrid model by `update_block_size_for_backend`, l. 785-787), so a connector run
    # on a release gets the layout it builds instead (`harness.targets.connector.vllm_layouts`).
    Capability("mamba_align_block", "an 'align' Mamba group's block is the cache block size "
               "(resolve_kv_cache_block_sizes takes a Mamba group with a block of its own for one outside 'align' mode "
               "and hashes at the scheduler block): a model with attention blocks beside a larger Mamba 'align' "
               "block has no layout on this release", _hashes_mamba_align_at_gcd),
    Capability("mamba_checkpoints", "MambaSpec has no num_prefill_checkpoint_blocks / prefill_checkpoint_alignment "
               "(no prefill checkpoints at aligned positions)",
               lambda m: {"num_prefill_checkpoint_blocks", "prefill_checkpoint_alignment"}
               <= set(fields_of(m["iface"].MambaSpec))),
    Capability("hisparse", "no HiSparse (vllm.v1.hisparse)", lambda m: m.get("hisparse_layout") is not None),
    Capability("hisparse_write_back", "HiSparseCoordinator has no advance_scheduled / steady-state concurrency "
               "(HiSparse before write-back spills and host indexer pages)",
               lambda m: hasattr(m["hisparse_coordinator"].HiSparseCoordinator, "advance_scheduled")
               and hasattr(m["hisparse_layout"], "get_hisparse_steady_state_concurrency")),
    # vLLM 0.30.0's get_hisparse_kv_cache_groups returns the planner's groups before HiSparse's split (the MLA group
    # and the model's other groups; None for a model of MLA layers only); create_hisparse_layout splits them, and
    # get_hisparse_gpu_memory_usage sizes the GPU side from those unsplit groups. From 0.31 the function returns the
    # split groups (source, indexer, resident, hot) that create_hisparse_layout sizes, and the unsplit-group helper is
    # gone (0.31.0 - 0.34.0 and the reference have no get_hisparse_gpu_memory_usage).
    Capability("hisparse_layout_groups", "get_hisparse_kv_cache_groups returns the planner's groups before "
               "HiSparse's split (create_hisparse_layout splits them; get_hisparse_gpu_memory_usage sizes them unsplit)",
               lambda m: m.get("hisparse_layout") is not None
               and not hasattr(m["hisparse_layout"], "get_hisparse_gpu_memory_usage")),
    # vLLM 0.30.0's HiSparseSourceManager: "Host capacity is best effort: a page that cannot get a host block keeps a
    # null host entry, so its GPU copy is never written back and stays pinned"; 0.31's: "Every page gets a host
    # block: allocation fails when the host pool cannot back it", with the coordinator checking that a request holds
    # no more resident pages than admission reserved (_fills_admission_window).
    Capability("hisparse_host_backed_pages", "HiSparse's host capacity is best effort (a page without a host block "
               "stays pinned on the GPU: admission does not wait for host blocks, and resident pages are not bounded "
               "by the in-flight window; no HiSparseCoordinator._fills_admission_window)",
               lambda m: _has(m["hisparse_coordinator"], "HiSparseCoordinator")
               and hasattr(m["hisparse_coordinator"].HiSparseCoordinator, "_fills_admission_window")),
    Capability("hisparse_backend", "HiSparse's host pool needs a platform backend (vllm.v1.hisparse.backend) and "
               "this machine's platform has none",
               lambda m: m.get("hisparse_backend") is None
               or m["platforms"].current_platform.get_hisparse_backend_cls() is not None),
    Capability("kv_event_lookahead", "BlockStored carries no lookahead_token_ids",
               lambda m: m.get("events") is not None and "lookahead_token_ids" in fields_of(m["events"].BlockStored)),
    Capability("cross_attention", "no CrossAttentionManager / allocate_slots num_encoder_tokens (no "
               "encoder-decoder KV cache)",
               lambda m: hasattr(m["iface"], "CrossAttentionSpec") and _has(m["stm"], "CrossAttentionManager")
               and "num_encoder_tokens" in _params(m["manager"].KVCacheManager.allocate_slots)),
    Capability("kv_cache_zeroing_resolved", "KVCacheConfig.needs_kv_cache_zeroing is a property of each worker's "
               "own layers (not one answer get_kv_cache_configs sets on every worker)",
               lambda m: "needs_kv_cache_zeroing" in fields_of(m["iface"].KVCacheConfig)),
    # The allocator shapes that one name in vLLM's code shows (reference_impl/kv_cache/release.py declares each).
    *_shape_capabilities(),
    Capability("kv_cache_zeroing", "KVCacheManager has no take_new_block_ids / record_blocks_for_zeroing (new "
               "blocks of a Mamba model are not recorded for zeroing)",
               lambda m: _has(m["manager"].KVCacheManager, "take_new_block_ids", "record_blocks_for_zeroing")),
    # Planning: layer specs -> KV cache groups -> a KVCacheConfig (the planner: kv_cache_planning, or
    # kv_cache_utils before it moved out), and the spec fields later releases plan by.
    Capability("grouping", "no KV cache planner (get_kv_cache_groups, unify_kv_cache_spec_page_size, "
               "get_kv_cache_config_from_groups)",
               lambda m: _has(m["planning"], "get_kv_cache_groups", "unify_kv_cache_spec_page_size",
                              "get_kv_cache_config_from_groups")),
    Capability("page_padding", "unify_kv_cache_spec_page_size only grows block sizes (a Mamba page, or one that "
               "does not divide the largest, is refused instead of padded)",
               lambda m: "page_size_padded" in inspect.getsource(m["planning"].unify_kv_cache_spec_page_size)),
    Capability("kv_cache_layouts", "no KVCacheLayout / compute_layout_strides (no planned layouts, no "
               "block-outermost packing of mixed page sizes)",
               lambda m: _has(m["iface"], "KVCacheLayout", "compute_layout_strides")),
    Capability("kv_cache_views", "no create_kv_cache_views / group_kernel_blocks (a planned tensor is not viewed "
               "per layer by the spec module)",
               lambda m: _has(m["iface"], "create_kv_cache_views", "group_kernel_blocks")),
    Capability("block_table_width", "no get_block_table_width (block-table rows are not widened to whole token "
               "tiles by the spec module)", lambda m: _has(m["iface"], "get_block_table_width")),
    Capability("kv_quant_modes", "no get_kv_quant_mode / kv_cache_uses_per_token_head_scales (a KV cache dtype "
               "name has no quantization mode)",
               lambda m: _has(m["iface"], "get_kv_quant_mode", "kv_cache_uses_per_token_head_scales")),
    Capability("strided_kv_cache_tensors", "KVCacheTensor names its layers by shared_by (one tensor per layer "
               "position: no layers, strides or offsets)",
               lambda m: {"layers", "layer_stride", "block_stride"} <= fields_of(m["iface"].KVCacheTensor)),
    Capability("layout_from_name", "KVCacheLayout has no from_name (kvconform's reference extension: vLLM "
               "resolves layout names in its cache config)", lambda m: hasattr(m["iface"].KVCacheLayout, "from_name")),
    Capability("extensible_kv_cache", "the planner has no shrink_kv_cache_configs / finalize_extensible_kv_cache "
               "(no KV cache sized after warmup)",
               lambda m: _has(m["planning"], "shrink_kv_cache_configs", "finalize_extensible_kv_cache")),
    Capability("stage_projection", "the planner has no _project_kv_cache_groups_to_worker (pipeline stages are "
               "not planned from global groups)",
               lambda m: _has(m["planning"], "_project_kv_cache_groups_to_worker")),
    Capability("mla_alignment", "MLAAttentionSpec has no alignment (MLA pages are not padded)",
               lambda m: "alignment" in fields_of(m["iface"].MLAAttentionSpec)),
    Capability("bounded_replay", "no SlidingWindowMLASpec with bounded_replay",
               lambda m: "bounded_replay" in fields_of(m["iface"].SlidingWindowMLASpec)),
    Capability("mamba_tp_replicated", "MambaSpec has no tp_replicated",
               lambda m: "tp_replicated" in fields_of(m["iface"].MambaSpec)),
    Capability("mamba_state_alignment", "MambaSpec has no state_alignment / is_uniform_with_collection (Mamba "
               "states are packed unaligned and grouped by shape)",
               lambda m: "state_alignment" in fields_of(m["iface"].MambaSpec)
               and hasattr(m["iface"].MambaSpec, "is_uniform_with_collection")),
    Capability("hisparse_packing", "MLAAttentionSpec has no block_stride_alignment or HiSparse's layout has no "
               "_build_hisparse_kv_cache_tensors (no hot pages packed beside MLA pages)",
               lambda m: "block_stride_alignment" in fields_of(m["iface"].MLAAttentionSpec)
               and _has(m["hisparse_layout"], "_build_hisparse_kv_cache_tensors")
               and _has(m["planning"], "_pool_bytes_per_block")),
    # kvconform's own extensions: probed like the rest, from the module map (only the reference's names them).
    Capability("kv_tensors", f"allocates no KV cache tensors from a planned config ({_EXTENSION}: its model "
               "runner allocates them)", lambda m: m["kv_tensors"] is not None),
    Capability("era_grouping", f"no era-styled grouping stage of the config resolver ({_EXTENSION})",
               lambda m: m["era_groups"] is not None),
)}


def probe_capabilities(mods: Mapping, capabilities: Mapping[str, Capability] | None = None
                       ) -> tuple[frozenset[str], dict[str, str]]:
    """(capabilities the release has, {capability it lacks: what it lacks}) from its modules (`ReleaseModules`
    of a target's module map, or any mapping of the short names of `PROBED_MODULES`). `capabilities`: the
    table to probe (the allocator's `CAPABILITIES` unless given; the connector's lives in
    `harness.targets.connector.capabilities`)."""
    have, lacks = set(), {}
    for cap in (CAPABILITIES if capabilities is None else capabilities).values():
        try:
            present = bool(cap.probe(mods))
        except (AttributeError, KeyError, TypeError, ValueError, ImportError, OSError):
            present = False  # the module, class or member the probe reads is not there
        if present:
            have.add(cap.name)
        else:
            lacks[cap.name] = cap.lacks
    return frozenset(have), lacks


def not_applicable(version: str, reason: str):
    """End the running check as not applicable: the release lacks what it needs (kind `release`, "N/A on X.Y.Z:
    reason", for the allocator's and the connector's capability tables alike)."""
    from harness import outcomes

    outcomes.not_applicable("release", reason, release=version)
