"""HiSparse's cache groups, host-pool sizing and concurrency bound (vLLM 0.33's `v1/hisparse/layout`).

HiSparse serves a sparse-MLA model (DeepSeek V3.2-style: a sparse latent cache plus an indexer cache per
layer) with the sparse "source" KV held in host memory. The groups, in order:
  source   the sparse-MLA layers, `host_resident`, role HISPARSE_SOURCE (own host pool);
  indexer  the indexer layers on the device, role HISPARSE_INDEXER (ordinary full attention);
  resident one `HiSparseResidentSpec` group per hot group: device copies of recent source pages;
  hot      `HiSparseHotSpec` groups: a fixed per-request region holding the top-k rows read this step;
  then any other layers, grouped as usual (`kv_cache_grouping.get_regular_kv_cache_groups`).
Every device group shares one pool; resident and hot groups pack source layers so that their page is
at most the indexer group's (so the shared pool's block fits them all).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from reference_impl.kv_cache.kv_cache_grouping import get_regular_kv_cache_groups
from reference_impl.kv_cache.kv_cache_interface import (
    HiSparseHotSpec,
    HiSparseResidentSpec,
    KVCacheConfig,
    KVCacheGroupRole,
    KVCacheGroupSpec,
    KVCacheLayout,
    KVCacheSpec,
    KVCacheTensor,
    MLAAttentionSpec,
    SparseCacheRole,
    UniformTypeKVCacheSpecs,
    cdiv,
)
from reference_impl.kv_cache.kv_cache_placement import (
    _build_kv_cache_tensors,
    _get_kv_cache_bytes_per_block,
    get_regular_kv_cache_config,
    validate_kv_cache_layout,
)

__all__ = [
    "ACTIVE_TAIL_PAGES",
    "HISPARSE_HOT_SUFFIX",
    "HISPARSE_RESIDENT_SUFFIX",
    "HiSparseLayout",
    "get_hisparse_device_buffer_size",
    "get_hisparse_host_pool_bytes",
    "get_hisparse_kv_cache_config",
    "get_hisparse_kv_cache_groups",
    "create_hisparse_layout",
    "get_hisparse_steady_state_concurrency",
]

#: Resident pages a request reading from the host keeps pinned per resident group (its writable tail).
ACTIVE_TAIL_PAGES = 2
#: Layer-name suffixes of the derived hot and resident caches of a source layer.
HISPARSE_HOT_SUFFIX = ".hisparse_hot"
HISPARSE_RESIDENT_SUFFIX = ".hisparse_resident"
# The hot region's row index is an int16 slot index.
_MAX_DEVICE_BUFFER_ROWS = 1 << 15


@dataclass(frozen=True)
class HiSparseLayout:
    """The sized HiSparse plan: the host source group, the device groups and the host pool."""

    source_group: KVCacheGroupSpec
    device_groups: list[KVCacheGroupSpec]
    host_num_blocks: int
    host_block_stride: int
    shared_host_pool: bool


def _hisparse_config(vllm_config):
    attention_config = getattr(vllm_config, "attention_config", None)
    return None if attention_config is None else getattr(attention_config, "hisparse_config", None)


def get_hisparse_host_pool_bytes(vllm_config) -> int:
    """Bytes of HiSparse's host pool: the HiSparse connector's `host_pool_gib` (its
    `kv_connector_extra_config`); ValueError when it is not configured."""
    transfer = getattr(vllm_config, "kv_transfer_config", None)
    extra = getattr(transfer, "kv_connector_extra_config", None) or {}
    gib = extra.get("host_pool_gib")
    if gib is None:
        raise ValueError("HiSparse requires HiSparseConnector with host_pool_gib")
    return int(gib * 2**30)


def _max_decode_query_len(vllm_config) -> int:
    """Widest decode query: one token plus the speculative tokens being verified."""
    spec = getattr(vllm_config, "speculative_config", None)
    num_spec = getattr(spec, "num_speculative_tokens", None) if spec is not None else None
    return 1 + (num_spec or 0)


def get_hisparse_device_buffer_size(vllm_config, top_k: int) -> int:
    """Rows of the per-request hot region: the configured `device_buffer_size`, else one top-k per
    decode query plus one top-k of LRU slack. ValueError when it cannot hold every query's top-k or
    overflows the int16 slot index."""
    max_query_len = _max_decode_query_len(vllm_config)
    configured = getattr(_hisparse_config(vllm_config), "device_buffer_size", None)
    rows = (max_query_len + 1) * top_k if configured is None else configured
    if rows < max_query_len * top_k:
        raise ValueError(f"HiSparse device_buffer_size must cover every decode query's index_topk rows: got "
                         f"device_buffer_size={rows}, max decode query length {max_query_len}, index_topk "
                         f"{top_k}; accepted: >= {max_query_len * top_k}")
    if rows > _MAX_DEVICE_BUFFER_ROWS:
        raise ValueError(f"HiSparse device_buffer_size exceeds the int16 slot-index limit: got {rows}, "
                         f"accepted: <= {_MAX_DEVICE_BUFFER_ROWS}")
    return rows


def _split_sparse_mla(layer_specs: dict[str, KVCacheSpec]):
    """(source specs, indexer specs) of the MLA layers; ValueError for what HiSparse cannot serve."""
    if any(getattr(s, "model_version", None) == "deepseek_v4" for s in layer_specs.values()):
        raise ValueError("HiSparse does not support DeepSeek V4 (its MLA layers compress tokens per state)")
    source = {n: s for n, s in layer_specs.items() if s.cache_role is SparseCacheRole.SPARSE}
    indexer = {n: s for n, s in layer_specs.items() if s.cache_role is SparseCacheRole.INDEXER}
    if not source or not indexer:
        raise ValueError(f"HiSparse requires sparse-MLA and indexer cache specs; got {len(source)} sparse and "
                         f"{len(indexer)} indexer layers")
    return source, indexer


def _wrap(layer_specs: dict[str, KVCacheSpec]) -> KVCacheSpec:
    wrapped = UniformTypeKVCacheSpecs.from_specs(layer_specs)
    if wrapped is None:
        raise ValueError(f"HiSparse requires uniform sparse-MLA cache specs: layers {sorted(layer_specs)} "
                         "differ in type or block size")
    return wrapped


def get_hisparse_kv_cache_groups(vllm_config, kv_cache_spec: dict[str, KVCacheSpec]) -> list[KVCacheGroupSpec] | None:
    """HiSparse's groups for these layers (order in the module docstring); None when HiSparse is not
    configured or no layer is MLA. Derived resident/hot specs already present are laid out again."""
    if _hisparse_config(vllm_config) is None:
        return None
    mla = {n: s for n, s in kv_cache_spec.items() if isinstance(s, MLAAttentionSpec)}
    if not mla:
        return None
    others = {n: s for n, s in kv_cache_spec.items()
              if not isinstance(s, (MLAAttentionSpec, HiSparseResidentSpec, HiSparseHotSpec))}
    source, indexer = _split_sparse_mla(mla)
    block_sizes = {s.block_size for s in (*source.values(), *indexer.values())}
    if len(block_sizes) != 1:
        raise ValueError(f"HiSparse requires one GPU block size for its MLA layers, got {sorted(block_sizes)}")
    block_size = block_sizes.pop()
    top_k = max(s.topk_buffer_width if s.topk_buffer_width is not None
                else vllm_config.model_config.hf_config.index_topk for s in source.values())
    hot_blocks = cdiv(get_hisparse_device_buffer_size(vllm_config, top_k), block_size)
    indexer_page = sum(s.page_size_bytes for s in indexer.values())

    # Hot units: a run of source layers starting at an index-group leader (they read one top-k).
    units: list[list[tuple[str, MLAAttentionSpec]]] = []
    for name, spec in source.items():
        if spec.is_index_group_leader or not units:
            units.append([])
        units[-1].append((name, spec))
    # Pack whole units into hot groups whose page stays within the indexer page.
    packs: list[list[tuple[str, MLAAttentionSpec]]] = []
    page = 0
    for unit in units:
        unit_page = sum(s.page_size_bytes for _, s in unit)
        if packs and page + unit_page <= indexer_page:
            packs[-1].extend(unit)
            page += unit_page
        else:
            packs.append(list(unit))
            page = unit_page
    resident_groups, hot_groups = [], []
    for pack in packs:
        pages = {s.page_size_bytes for _, s in pack}
        if len(pages) != 1:
            raise ValueError(f"HiSparse hot-cache groups require one page size, got {sorted(pages)}")
        page_size = pages.pop()
        resident_groups.append(KVCacheGroupSpec(
            [n + HISPARSE_RESIDENT_SUFFIX for n, _ in pack],
            HiSparseResidentSpec(block_size=block_size, page_size=page_size), enable_kv_transfer=False))
        hot_groups.append(KVCacheGroupSpec(
            [n + HISPARSE_HOT_SUFFIX for n, _ in pack],
            HiSparseHotSpec(block_size=block_size, page_size=page_size, blocks_per_request=hot_blocks),
            enable_kv_transfer=False))

    source_group = KVCacheGroupSpec(list(source), _wrap(source), host_resident=True,
                                    role=KVCacheGroupRole.HISPARSE_SOURCE)
    indexer_group = KVCacheGroupSpec(list(indexer), _wrap(indexer), role=KVCacheGroupRole.HISPARSE_INDEXER)
    regular = get_regular_kv_cache_groups(vllm_config, others)
    return [source_group, indexer_group, *resident_groups, *hot_groups, *regular]


def create_hisparse_layout(vllm_config, groups: list[KVCacheGroupSpec], host_budget: int) -> HiSparseLayout:
    """Size the host pool from `host_budget` bytes (one host block: one source page).

    Every computed page needs a host block, so one max_model_len request, the pool's null block and one
    copy-on-write tail must fit: ValueError (asking to increase host_pool_gib) otherwise.
    """
    sources = [g for g in groups if g.host_resident]
    if len(sources) != 1:
        raise ValueError(f"HiSparse needs exactly one host-resident source group, got {len(sources)}")
    source = sources[0]
    stride = source.kv_cache_spec.page_size_bytes
    host_num_blocks = host_budget // stride
    if host_num_blocks <= 0:
        raise ValueError(f"HiSparse has no allocatable host blocks: host budget {host_budget} bytes < one "
                         f"host block of {stride} bytes")
    needed = cdiv(vllm_config.model_config.max_model_len, source.kv_cache_spec.block_size) + 2
    if host_num_blocks < needed:
        raise ValueError(f"HiSparse host pool has {host_num_blocks} blocks but max_model_len "
                         f"({vllm_config.model_config.max_model_len}) needs {needed}; increase host_pool_gib")
    return HiSparseLayout(source_group=source, device_groups=[g for g in groups if not g.host_resident],
                          host_num_blocks=host_num_blocks, host_block_stride=stride, shared_host_pool=False)


def _build_hisparse_kv_cache_tensors(kv_cache_groups: list[KVCacheGroupSpec], num_blocks: int, size: int,
                                     layout: KVCacheLayout, bytes_per_block: int, *,
                                     host_resident: bool = False) -> list[KVCacheTensor]:
    """The tensors of HiSparse's groups in one allocation of `size` bytes (`num_blocks` blocks of
    `bytes_per_block`), placed as every pool is placed (`kv_cache_placement._build_kv_cache_tensors`):
    the hot and resident pages need a block-outermost `layout`; `host_resident` marks the host pool's."""
    return _build_kv_cache_tensors(kv_cache_groups, num_blocks, size, layout, bytes_per_block,
                                   host_resident=host_resident)


#: The host pool's layout: layer-outermost, each source layer a run of host blocks.
_HOST_LAYOUT = KVCacheLayout.LBNHC


def get_hisparse_kv_cache_config(vllm_config, kv_cache_groups: list[KVCacheGroupSpec], available_memory: int,
                                 host_budget: int) -> KVCacheConfig:
    """HiSparse's `KVCacheConfig`: the device groups share the device pool of `available_memory` bytes,
    placed as any model's pool is (`kv_cache_placement.get_regular_kv_cache_config`: the config's resolved
    layout, `num_gpu_blocks_override`); the host source group gets the host pool of `host_budget` bytes
    (`create_hisparse_layout`), its tensors first."""
    hisparse = create_hisparse_layout(vllm_config, kv_cache_groups, host_budget)
    device = get_regular_kv_cache_config(vllm_config, hisparse.device_groups, available_memory)
    host_groups = [hisparse.source_group]
    validate_kv_cache_layout(_HOST_LAYOUT, host_groups)
    host_bytes_per_block = _get_kv_cache_bytes_per_block(host_groups, _HOST_LAYOUT)
    host_tensors = _build_hisparse_kv_cache_tensors(host_groups, hisparse.host_num_blocks,
                                                    host_bytes_per_block * hisparse.host_num_blocks, _HOST_LAYOUT,
                                                    host_bytes_per_block, host_resident=True)
    return replace(device, kv_cache_tensors=[*host_tensors, *device.kv_cache_tensors],
                   kv_cache_groups=[*host_groups, *device.kv_cache_groups],
                   hisparse_host_num_blocks=hisparse.host_num_blocks,
                   hisparse_host_block_stride=hisparse.host_block_stride,
                   hisparse_shared_host_pool=hisparse.shared_host_pool)


def get_hisparse_steady_state_concurrency(vllm_config, kv_cache_config: KVCacheConfig) -> float:
    """Requests of max_model_len tokens HiSparse runs at once once they read from the host.

    Admitting a request takes its full device footprint; a running request that reads from the host
    keeps only `ACTIVE_TAIL_PAGES` per resident group. So the device bound is one request being admitted
    plus the rest at steady state (a fraction of one when not even one admission fits), and the host
    pool bounds it too.
    """
    if kv_cache_config.hisparse_host_num_blocks is None:
        raise ValueError("KVCacheConfig.hisparse_host_num_blocks is None: not a HiSparse configuration")
    admission = steady = host = 0
    for group in kv_cache_config.kv_cache_groups:
        spec = group.kv_cache_spec
        blocks = cdiv(spec.max_memory_usage_bytes(vllm_config), spec.page_size_bytes)
        if group.host_resident:
            host += blocks
            continue
        admission += blocks
        steady += min(blocks, ACTIVE_TAIL_PAGES) if isinstance(spec, HiSparseResidentSpec) else blocks
    num_blocks = kv_cache_config.num_blocks
    device = num_blocks / admission if num_blocks < admission else 1 + (num_blocks - admission) / steady
    return min(device, kv_cache_config.hisparse_host_num_blocks / host)
