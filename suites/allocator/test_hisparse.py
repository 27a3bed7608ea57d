"""Spec section 4/5: HiSparse's allocator side and the KVCacheConfig helpers of vLLM 0.33 (issue 10).

HiSparse keeps a sparse-MLA model's source KV in a host pool and, on the device, an indexer group,
resident copies of source pages and a per-request hot region. Every expected value below was worked out
by hand from vLLM 0.33's rules (the arithmetic is next to each case) and then confirmed on both targets;
none is computed by the allocator under test. With `--kv-allocator vllm` these gate a vLLM change to the
HiSparse specs, managers, host-pool sizing or concurrency bound.

vLLM keeps HiSparse's layout helpers and its coordinator in `vllm.v1.hisparse` (outside `v1/core`); the
reference has them in `reference_impl.kv_cache.hisparse_layout` and `.hisparse_coordinator`. Each target
says where it keeps them in its module map (`harness.targets.allocator.target.target_module`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import pytest
import torch

from suites.allocator.helpers import hisparse_api

SECTION = "4"

BS = 16  # HiSparse block size of the manager scenarios
PAGE = 64  # bytes of one resident / hot page in the manager scenarios


@pytest.fixture
def api(target):
    return hisparse_api(target)


def _lengths(max_model_len: int, max_in_flight_tokens: int) -> SimpleNamespace:
    """The parts of a vllm_config that spec sizing reads."""
    return SimpleNamespace(model_config=SimpleNamespace(max_model_len=max_model_len),
                           parallel_config=SimpleNamespace(decode_context_parallel_size=1),
                           max_in_flight_tokens=max_in_flight_tokens)


def _attn(api, dtype=torch.float32, block_size=BS):
    return api.iface.FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=1, dtype=dtype)


def _hisparse_config(api, num_blocks: int, host_num_blocks: int | None, *, resident_block_size: int = BS):
    """source (host) + indexer + resident + hot (2 pages per request), the shape vLLM's tests use."""
    iface = api.iface
    role = iface.KVCacheGroupRole
    src = _attn(api)
    groups = [
        iface.KVCacheGroupSpec(["source"], src, role=role.HISPARSE_SOURCE, host_resident=True),
        iface.KVCacheGroupSpec(["indexer"], src, enable_kv_transfer=False, role=role.HISPARSE_INDEXER),
        iface.KVCacheGroupSpec(["resident"], iface.HiSparseResidentSpec(block_size=resident_block_size,
                                                                        page_size=PAGE),
                               enable_kv_transfer=False),
        iface.KVCacheGroupSpec(["hot"], iface.HiSparseHotSpec(block_size=BS, page_size=PAGE, blocks_per_request=2),
                               enable_kv_transfer=False),
    ]
    return iface.KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups,
                               hisparse_host_num_blocks=host_num_blocks)


def _hisparse_manager(api, num_blocks: int, host_num_blocks: int | None, **config_kwargs):
    config = _hisparse_config(api, num_blocks, host_num_blocks, **config_kwargs)
    scheduler_block_size = math.lcm(*(g.kv_cache_spec.block_size for g in config.kv_cache_groups))
    manager = api.manager.KVCacheManager(config, 128, scheduler_block_size, BS, enable_caching=True)
    api.bind(manager)
    return manager


# ---------------------------------------------------------------------------------------------- specs
def test_hisparse_specs_are_pages_never_prefix_cached(api):
    hot = api.iface.HiSparseHotSpec(block_size=BS, page_size=PAGE, blocks_per_request=2)
    resident = api.iface.HiSparseResidentSpec(block_size=BS, page_size=PAGE)
    for spec in (hot, resident):
        assert spec.page_size_bytes == PAGE, f"{type(spec).__name__}: a page is page_size bytes"
        assert spec.prefix_cacheable is False, f"{type(spec).__name__}: the host source owns prefix caching"
    assert hot.max_memory_usage_bytes(_lengths(160, 160)) == 2 * PAGE, "hot: blocks_per_request pages, always"


# Resident pages spill to the host once durable: a request needs its in-flight window, capped by the
# model length.  (max_model_len, max_in_flight_tokens, admission blocks = cdiv(min(both), 16)).
RESIDENT_SIZES = [(160, 48, 3), (160, 1000, 10), (160, 17, 2)]


@pytest.mark.parametrize("max_model_len,in_flight,blocks", RESIDENT_SIZES)
@pytest.mark.needs('hisparse', 'hisparse_host_backed_pages')
def test_resident_spec_is_sized_by_its_in_flight_window(api, max_model_len, in_flight, blocks):
    spec = api.iface.HiSparseResidentSpec(block_size=BS, page_size=PAGE)
    assert spec.max_admission_blocks_per_request(max_in_flight_tokens=in_flight,
                                                 max_model_len=max_model_len) == blocks, \
        f"cdiv(min({in_flight}, {max_model_len}), {BS}) = {blocks} resident pages to admit a request"
    assert spec.max_memory_usage_bytes(_lengths(max_model_len, in_flight)) == blocks * PAGE


# ---------------------------------------------------------------------------------- KVCacheConfig
def test_kv_cache_config_selects_transfer_prefix_cacheable_and_host_groups(api):
    iface = api.iface
    resident = iface.HiSparseResidentSpec(block_size=BS, page_size=PAGE)
    groups = [
        iface.KVCacheGroupSpec(["full.0", "full.1"], _attn(api)),
        iface.KVCacheGroupSpec(["scratch"], _attn(api), enable_kv_transfer=False),
        iface.KVCacheGroupSpec(["resident"], resident),  # transferable, but not prefix-cacheable
        iface.KVCacheGroupSpec(["host"], _attn(api), host_resident=True),
    ]
    config = iface.KVCacheConfig(num_blocks=8, kv_cache_tensors=[], kv_cache_groups=groups)
    assert config.transfer_group_ids == (0, 2, 3), "groups with enable_kv_transfer, in order"
    assert config.transfer_groups == (groups[0], groups[2], groups[3])
    assert config.transfer_group_index_by_layer == {"full.0": 0, "full.1": 0, "resident": 1, "host": 2}, \
        "a layer maps to its group's index among the transfer groups"
    assert config.prefix_cacheable_group_ids == (0, 3), "transferable and prefix-cacheable: not the resident group"
    assert config.host_group_ids == (3,)
    assert config.select_transfer_block_ids(([1, 2], [3], [4], [5])) == ([1, 2], [4], [5])
    with pytest.raises(ValueError, match="4"):
        config.select_transfer_block_ids(([1], [2]))


# (group dtypes, host-resident flags, Mamba layer?, zeroing needed): Mamba state is read before it is
# written; a block reused across precisions would decode stale bytes; host groups never share device blocks.
ZEROING = [
    ((torch.float16, torch.float16), (False, False), False, False),
    ((torch.float16, torch.bfloat16), (False, False), False, True),
    ((torch.float16, torch.bfloat16), (False, True), False, False),
    ((torch.float16,), (False,), True, True),
]


@pytest.mark.parametrize("dtypes,host,mamba,expected", ZEROING)
def test_needs_kv_cache_zeroing(api, dtypes, host, mamba, expected):
    iface = api.iface
    groups = [iface.KVCacheGroupSpec([f"attn{i}"], _attn(api, dtype), host_resident=h)
              for i, (dtype, h) in enumerate(zip(dtypes, host))]
    if mamba:
        spec = iface.MambaSpec(block_size=4, shapes=((4, 1),), dtypes=(torch.float32,))
        wrapped = iface.UniformTypeKVCacheSpecs(block_size=4, kv_cache_specs={"mamba": spec})
        groups.append(iface.KVCacheGroupSpec(["mamba"], wrapped))
    config = iface.KVCacheConfig(num_blocks=4, kv_cache_tensors=[], kv_cache_groups=groups)
    assert config.needs_kv_cache_zeroing is expected, f"dtypes {dtypes}, host {host}, mamba {mamba}"


def test_per_token_head_scales_are_part_of_the_page(api):
    """A backend packing fp32 scales after each head's K and V publishes the packed cell width."""
    from dataclasses import replace

    dense = api.iface.FullAttentionSpec(block_size=BS, num_kv_heads=2, head_size=8, dtype=torch.uint8)
    # 2 heads x 16 states x 8+8 bytes = 512; packed: 2 x 16 x (16 + 2 x 4) = 768.
    assert dense.page_size_bytes == 512
    packed = replace(dense, state_content_bytes=16 + 2 * 4)
    assert packed.unpadded_page_size_bytes == 768
    assert packed.page_size_bytes == 768
    assert replace(packed, page_size_padded=1024).page_size_bytes == 1024, "an explicit padded size wins"


def test_dcp_block_size_of_a_same_type_wrapper_follows_its_layers(api):
    attn = api.iface.FullAttentionSpec(block_size=BS, num_kv_heads=1, head_size=8, dtype=torch.float16)
    wrapped = api.iface.UniformTypeKVCacheSpecs(block_size=BS, kv_cache_specs={"a": attn, "b": attn})
    assert api.utils.resolve_dcp_kv_block_size(wrapped, 4) == 64, "attention wrapper: 16 x 4 DCP ranks"
    scaled = api.utils.resolve_dcp_kv_cache_spec(wrapped, 4)
    assert [s.block_size for s in scaled.kv_cache_specs.values()] == [64, 64], "its layers scale with it"


# ------------------------------------------------------------------------------------------ managers
def test_hisparse_groups_get_their_managers(api):
    manager = _hisparse_manager(api, 32, 16)
    names = [type(m).__name__ for m in manager.coordinator.single_type_managers]
    assert names == ["HiSparseSourceManager", "FullAttentionManager", "HiSparseResidentManager",
                     "HiSparseHotManager"], "the source group is chosen by role, the others by spec"


@pytest.mark.needs('hisparse', 'hisparse_write_back')
def test_hisparse_cold_admission_allocates_host_indexer_and_resident_pages(api, target):
    """40 tokens = 3 pages of 16. Source pages come from the host pool (its block 0 is its null block),
    indexer then resident from the device pool; a cold request reads nothing from the host, so no hot
    region. Device pool 32: 31 free - 6 = 25; host pool 16: 15 free - 3 = 12."""
    manager = _hisparse_manager(api, 32, 16)
    source = manager.coordinator.single_type_managers[0]
    req = target.make_request("cold", list(range(40)), BS)
    out = manager.allocate_slots(req, 40)
    assert out is not None, "3 host pages and 6 device pages fit"
    assert [list(ids) for ids in out.get_block_ids()] == [[1, 2, 3], [1, 2, 3], [4, 5, 6], []]
    assert manager.block_pool.get_num_free_blocks() == 25
    assert source.block_pool.get_num_free_blocks() == 12, "host pages come from the host pool"
    req.num_computed_tokens = 40
    manager.free(req)
    assert manager.block_pool.get_num_free_blocks() == 31
    assert source.block_pool.get_num_free_blocks() == 15, "host pages go back to the host pool"


@pytest.mark.needs('hisparse', 'hisparse_host_backed_pages')
def test_hisparse_admission_waits_for_host_capacity(api, target):
    """Every page needs a host block: 64 tokens = 4 pages, but a host pool of 4 has 3 usable blocks, so
    the request is refused although the device pool has room, and nothing is allocated."""
    manager = _hisparse_manager(api, 32, 4)
    req = target.make_request("big", list(range(64)), BS)
    assert manager.allocate_slots(req, 64) is None
    assert manager.block_pool.get_num_free_blocks() == 31
    assert manager.allocate_slots(target.make_request("small", list(range(48)), BS), 48) is not None, \
        "3 pages fit the 3 usable host blocks"


def test_hisparse_host_and_resident_block_sizes_must_match(api):
    with pytest.raises(ValueError, match="block sizes must match"):
        _hisparse_manager(api, 32, 16, resident_block_size=2 * BS)


def test_hisparse_source_group_needs_host_capacity(api):
    with pytest.raises(ValueError, match="host capacity"):
        _hisparse_manager(api, 32, None)


# --------------------------------------------------------------------------- layout and concurrency
@pytest.mark.needs('hisparse', 'hisparse_write_back')
def test_hisparse_steady_state_concurrency(api):
    """max_model_len = in-flight = 160 = 10 pages. Admission: indexer 10 + resident 10 + hot 4 = 24;
    steady state: indexer 10 + resident tail 2 + hot 4 = 16. Pool 64: 1 + (64 - 24) / 16 = 3.5 (host
    100 / 10 = 10 does not bind). The worst-case bound charges 24 per request: 64 / 24."""
    iface = api.iface
    attn = iface.FullAttentionSpec(block_size=BS, num_kv_heads=1, head_size=64, dtype=torch.float16)
    page = attn.page_size_bytes
    config = iface.KVCacheConfig(num_blocks=64, kv_cache_tensors=[], hisparse_host_num_blocks=100, kv_cache_groups=[
        iface.KVCacheGroupSpec(["source"], attn, host_resident=True),
        iface.KVCacheGroupSpec(["indexer"], attn),
        iface.KVCacheGroupSpec(["resident"], iface.HiSparseResidentSpec(block_size=BS, page_size=page)),
        iface.KVCacheGroupSpec(["hot"], iface.HiSparseHotSpec(block_size=BS, page_size=page, blocks_per_request=4)),
    ])
    lengths = _lengths(10 * BS, 10 * BS)
    assert api.layout.get_hisparse_steady_state_concurrency(lengths, config) == 3.5
    assert api.utils.get_max_concurrency_for_kv_cache_config(lengths, config) == pytest.approx(64 / 24)


def _sparse_mla_specs(api, **source_kwargs) -> dict:
    iface = api.iface
    return {
        "model.layers.0.self_attn": iface.MLAAttentionSpec(
            block_size=64, num_kv_heads=1, head_size=576, dtype=torch.bfloat16, is_index_group_leader=True,
            **source_kwargs),
        "model.layers.0.self_attn.indexer": iface.MLAAttentionSpec(
            block_size=64, num_kv_heads=1, head_size=128, dtype=torch.bfloat16,
            cache_role=iface.SparseCacheRole.INDEXER),
    }


def _layout_config(max_model_len: int = 256) -> SimpleNamespace:
    return SimpleNamespace(
        attention_config=SimpleNamespace(hisparse_config=SimpleNamespace(device_buffer_size=None,
                                                                         eager_host_mirror=True)),
        model_config=SimpleNamespace(hf_config=SimpleNamespace(index_topk=128), max_model_len=max_model_len),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, world_size=1, pipeline_parallel_size=1,
                                        prefill_context_parallel_size=1, decode_context_parallel_size=1),
        cache_config=SimpleNamespace(num_gpu_blocks_override=None))


@pytest.mark.needs('hisparse', 'hisparse_layout_groups')
def test_hisparse_groups_of_a_sparse_mla_layer(api):
    """One sparse-MLA layer: source (host), indexer, one resident and one hot group. Hot region: top-k 128
    x (1 decode query + 1 of slack) = 256 rows = 4 blocks of 64; pages 64 x 576 x 2 bytes = 73728."""
    groups = api.layout.get_hisparse_kv_cache_groups(_layout_config(), _sparse_mla_specs(api))
    assert [g.layer_names for g in groups] == [
        ["model.layers.0.self_attn"], ["model.layers.0.self_attn.indexer"],
        ["model.layers.0.self_attn.hisparse_resident"], ["model.layers.0.self_attn.hisparse_hot"]]
    assert [g.host_resident for g in groups] == [True, False, False, False]
    role = api.iface.KVCacheGroupRole
    assert [g.role for g in groups[:2]] == [role.HISPARSE_SOURCE, role.HISPARSE_INDEXER]
    assert [g.enable_kv_transfer for g in groups] == [True, True, False, False]
    resident, hot = groups[2].kv_cache_spec, groups[3].kv_cache_spec
    assert (resident.block_size, resident.page_size) == (64, 73728)
    assert (hot.block_size, hot.page_size, hot.blocks_per_request) == (64, 73728, 4)


# The host pool must hold one max_model_len request (256 / 64 = 4 pages) + null block + a CoW tail = 6.
@pytest.mark.parametrize("host_pages,ok", [(5, False), (6, True)])
@pytest.mark.needs('hisparse', 'hisparse_backend', 'hisparse_layout_groups')
def test_hisparse_host_pool_must_fit_max_model_len(api, host_pages, ok):
    config = _layout_config(max_model_len=256)
    specs = _sparse_mla_specs(api)
    groups = api.layout.get_hisparse_kv_cache_groups(config, specs)
    budget = host_pages * specs["model.layers.0.self_attn"].page_size_bytes
    if ok:
        assert api.layout.create_hisparse_layout(config, groups, host_budget=budget).host_num_blocks == host_pages
    else:
        with pytest.raises(ValueError, match="increase host_pool_gib"):
            api.layout.create_hisparse_layout(config, groups, host_budget=budget)


@pytest.mark.needs('hisparse', 'hisparse_layout_groups')
def test_hisparse_rejects_deepseek_v4(api):
    specs = _sparse_mla_specs(api, model_version="deepseek_v4")
    with pytest.raises(ValueError, match="does not support DeepSeek V4"):
        api.layout.get_hisparse_kv_cache_groups(_layout_config(), specs)


# ------------------------------------------------------------------------------------------ bad input
def test_spec_of_an_unknown_kind_has_no_manager(api):
    """vLLM asserts that a manager is registered for the spec; the message names the spec type."""

    @dataclass(frozen=True, kw_only=True)
    class OddCacheSpec(api.iface.KVCacheSpec):
        pass

    pool = api.pool.BlockPool(8, True, BS)
    with pytest.raises(AssertionError, match="OddCacheSpec"):
        api.stm.get_manager_for_kv_cache_spec(OddCacheSpec(block_size=BS), 64, 64, block_pool=pool,
                                              enable_caching=True, kv_cache_group_id=0, scheduler_block_size=BS)


def test_block_size_that_is_not_a_multiple_of_the_hash_block_size(api, target):
    """vLLM asserts (bare); a target that validates strictly also names both sizes."""
    with pytest.raises(AssertionError) as info:
        api.utils.BlockHashListWithBlockSize([b"h"] * 6, BS, 24)
    if "strict_input_validation" in target.capabilities:
        assert "24" in str(info.value) and str(BS) in str(info.value), \
            f"the message names the block size 24 and the hash block size {BS}: {info.value}"


# -------------------------------------------------------------------------------------- coordinator
@pytest.mark.needs('hisparse', 'hisparse_write_back')
def test_hisparse_host_pages_publish_only_after_their_write_back(api, target):
    """40 tokens = 2 sealed pages + 1 partial. After the step, the coordinator plans one device -> host
    write-back per sealed page (host blocks 1, 2 <- resident blocks 4, 5; the partial page 2 waits). Each
    transfer holds a second reference on both ends until every worker reports it done. The host prefix
    is published only then: a second request with the same 40-token prompt hits 0 tokens before and
    32 after (2 pages; the last prompt token is always recomputed)."""
    manager = _hisparse_manager(api, 32, 16)
    coordinator = api.bind(manager)
    source = manager.coordinator.single_type_managers[0]
    first = target.make_request("first", list(range(40)), BS)
    assert manager.allocate_slots(first, 40) is not None
    coordinator.advance_scheduled([("first", 40)])
    transfers = coordinator.build_offload_command().page_transfers
    assert [(t.host_block_id, tuple(t.resident_block_ids), t.restore) for t in transfers] \
        == [(1, (4,), False), (2, (5,), False)], "one write-back per sealed page, oldest first"
    # Up to 0.33 a write-back says it runs after the forward pass; 0.34 dropped the flag (every transfer
    # that is not a restore is one).
    assert all(getattr(t, "after_forward", True) for t in transfers), "write-backs run after the forward pass"
    host, resident = source.block_pool.blocks, manager.block_pool.blocks
    assert [host[1].ref_cnt, host[2].ref_cnt, resident[4].ref_cnt, resident[5].ref_cnt] == [2, 2, 2, 2], \
        "a transfer in flight pins both of its ends"
    assert coordinator.has_pending_work()

    hit = manager.get_computed_blocks(target.make_request("early", list(range(40)), BS))[1]
    assert hit == 0, "host pages are not published before their write-back completes"

    done = {t.transfer_id: 1 for t in transfers}
    coordinator.update_spills(done, done)
    assert [host[1].ref_cnt, host[2].ref_cnt, resident[4].ref_cnt, resident[5].ref_cnt] == [1, 1, 1, 1]
    assert not coordinator.has_pending_work()
    hit = manager.get_computed_blocks(target.make_request("late", list(range(40)), BS))[1]
    assert hit == 32, "the two written-back pages are published"


@pytest.mark.needs('hisparse', 'hisparse_write_back')
def test_hisparse_write_back_waits_for_every_worker(api, target):
    """A transfer enqueued on 2 workers stays pending (and pinned) until both completions arrive."""
    manager = _hisparse_manager(api, 32, 16)
    coordinator = api.bind(manager)
    req = target.make_request("r", list(range(16)), BS)
    assert manager.allocate_slots(req, 16) is not None
    coordinator.advance_scheduled([("r", 16)])
    [transfer] = coordinator.build_offload_command().page_transfers
    resident_block = manager.block_pool.blocks[transfer.resident_block_ids[0]]
    coordinator.update_spills({transfer.transfer_id: 2}, {transfer.transfer_id: 1})
    assert resident_block.ref_cnt == 2 and coordinator.has_pending_work(), "1 of 2 workers done"
    coordinator.update_spills({}, {transfer.transfer_id: 1})
    assert resident_block.ref_cnt == 1 and not coordinator.has_pending_work(), "2 of 2 workers done"


@pytest.mark.needs('hisparse', 'hisparse_write_back')
def test_hisparse_import_tail_is_no_copy_until_its_restore_lands(api, target):
    """A 16-token prompt imported into host page 0 (one full page; the device page is the writable tail
    an import keeps). Finishing the import plans one host -> device restore of that page; caching the
    imported prefix meanwhile must not index the device page as a readable copy of the host page (it
    holds nothing yet). Once every worker reports the restore, the page is indexed."""
    manager = _hisparse_manager(api, 32, 16)
    coordinator = api.bind(manager)
    req = target.make_request("import", list(range(16)), BS)
    assert manager.allocate_slots(req, 0, num_external_computed_tokens=16, delay_cache_blocks=True,
                                  full_sequence_must_fit=True) is not None
    source, _, resident, _ = manager.get_blocks("import").blocks
    coordinator.finish_host_import("import", failed=False)
    [restore] = coordinator.build_offload_command().page_transfers
    assert restore.restore and restore.resident_block_ids == (resident[0].block_id,)
    req.num_computed_tokens = 16
    manager.cache_blocks(req, 16)
    assert all(resident[0] not in copies for copies in coordinator.copies.values()), \
        "a device page with a restore in flight is not a copy of the host page"
    coordinator.update_spills({restore.transfer_id: 1}, {restore.transfer_id: 1})
    assert coordinator.copies[source[0].block_hash] == (resident[0],), "the landed restore is the copy"


@pytest.mark.needs('hisparse', 'hisparse_write_back', 'hisparse_import_reservation')
def test_hisparse_import_reserves_its_remaining_host_pages(api, target):
    """A host pool of 8 blocks: 7 usable (block 0 is its null block). "first", a 48-token prompt (3 pages),
    imports its first page: it holds 1 host page and reserves the 2 it has yet to allocate, since a waiting
    import keeps its pages and is never preempted. A second import must fit its whole prompt beside them:
    6 free - 2 reserved = 4 pages, so a 5-page (80-token) import is refused although 6 blocks are free, and
    a 4-page one would fit. A local admission (nothing imported) is not gated by the reservation. Freeing
    "first" returns its page and drops its reservation: the 5-page import then fits (7 free)."""
    manager = _hisparse_manager(api, 64, 8)
    api.bind(manager)
    source = manager.coordinator.single_type_managers[0]

    def admit_import(request_id: str, num_pages: int, offset: int):
        req = target.make_request(request_id, list(range(offset, offset + num_pages * BS)), BS)
        return req, manager.allocate_slots(req, 0, num_external_computed_tokens=BS, delay_cache_blocks=True,
                                           full_sequence_must_fit=True)

    first, out = admit_import("first", 3, 0)
    assert out is not None and source.block_pool.get_num_free_blocks() == 6, "first holds 1 of 7 host pages"
    assert admit_import("second", 5, 1000)[1] is None, "5 pages > 6 free - 2 reserved for first"
    assert source.block_pool.get_num_free_blocks() == 6, "a refused admission allocates nothing"
    local = target.make_request("local", list(range(2000, 2000 + 5 * BS)), BS)
    assert manager.allocate_slots(local, 5 * BS, full_sequence_must_fit=True) is not None, \
        "a local admission of 5 pages needs only the 6 free host blocks"
    local.num_computed_tokens = 5 * BS
    manager.free(local)
    manager.free(first)
    assert source.block_pool.get_num_free_blocks() == 7
    assert admit_import("second", 5, 1000)[1] is not None, "nothing is reserved once first is freed"


@pytest.mark.needs('hisparse', 'hisparse_write_back', 'connector_lookup')
def test_hisparse_host_hit_past_the_local_prefix_is_not_adopted(api, target):
    """A 64-token prompt (4 pages) is computed, written back and published, then freed. Evicting the
    indexer's page 1 leaves the device groups a 16-token hit while the host source still holds pages 0-2
    (the last prompt token is always recomputed, so not page 3): the connector lookup returns both. A step
    adopting the 16 local tokens and computing 1 new one (17 tokens, 2 pages) takes host page 0 and one new
    host block; host pages 1 and 2, past the adopted prefix, are not held by the request."""
    manager = _hisparse_manager(api, 32, 16)
    coordinator = api.bind(manager)
    first = target.make_request("first", list(range(64)), BS)
    assert manager.allocate_slots(first, 64) is not None
    coordinator.advance_scheduled([("first", 64)])
    done = {t.transfer_id: 1 for t in coordinator.build_offload_command().page_transfers}
    coordinator.update_spills(done, done)
    host, indexer, _, _ = manager.get_blocks("first").blocks
    first.num_computed_tokens = 64
    manager.free(first)
    manager.block_pool.evict_blocks({indexer[1].block_id})

    resumed = target.make_request("resumed", list(range(64)), BS)
    blocks, local = manager.get_computed_blocks_for_connector(resumed)[:2]
    assert local == 16, "the indexer's hit ends at its evicted page 1"
    assert [len(g) for g in blocks.blocks] == [3, 1, 0, 0], "the host source keeps its own 3-page hit"
    assert manager.allocate_slots(resumed, 1, num_new_computed_tokens=16, new_computed_blocks=blocks) is not None
    table = manager.get_blocks("resumed").blocks[0]
    assert len(table) == 2 and table[0] is host[0], "host page 0 adopted, then one new block for token 17"
    assert all(block not in table and block.ref_cnt == 0 for block in host[1:3]), \
        "host pages 1 and 2 are past the adopted prefix: not held"
