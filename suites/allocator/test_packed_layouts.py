"""Spec section 3: KV cache layouts and contiguous packing (vLLM 0.33's `KVCacheLayout`,
`compute_layout_strides` and block-outermost packing of mixed page sizes), and the specs packing groups
by (DeepSeek V4's padded MLA pages, bounded-replay sliding-window MLA, TP-replicated Mamba state), on the
target's own planner and spec classes (`planning_api`); each scenario names the capabilities it needs, so a
release without one is N/A, and the tensors allocated from a plan are the reference's extension. The spec
module's per-layer views of a planned tensor (`create_kv_cache_views`, vLLM's worker binds its cache with
them) and its block-table row width close the file.

Every expected stride, offset and page below is worked out by hand in the comment next to it (bytes),
from the layout rule: axes laid out innermost first, each stride the bytes of everything inside it.
"""

import dataclasses
import inspect

import pytest
import torch

from harness.targets.allocator.target import target_module
from suites.allocator.helpers import extension, planning_api, refused

SECTION = "3"


def _full(api, heads=2, head_size=64):
    # block 16, fp16: H = heads, N = 16 states, C = (64 K + 64 V) * 2 bytes = 256; page = heads * 4096
    return api.spec("full", num_kv_heads=heads, head_size=head_size)


@pytest.mark.parametrize("layout,fixed,expected", [
    # 4 layers x 10 blocks of an 8192-byte page (H 2, N 16, C 256); strides in (L, B, H, N, C) order
    ("LBHNC", None, (81920, 8192, 4096, 256, 1)),   # N 256, H 16*256, B 2*4096, L 10*8192
    ("LBNHC", None, (81920, 8192, 256, 512, 1)),    # H 256, N 2*256, B 16*512, L 10*8192
    ("LHBNC", None, (81920, 4096, 40960, 256, 1)),  # N 256, B 16*256, H 10*4096, L 2*40960
    ("BLHNC", None, (8192, 32768, 4096, 256, 1)),   # N 256, H 4096, L 2*4096, B 4*8192
    ("BLHNC", 50000, (8192, 50000, 4096, 256, 1)),  # a fixed block stride replaces the derived 32768
])
def test_layout_strides_follow_axis_order(target, layout, fixed, expected):
    api = planning_api(target, "kv_cache_layouts")
    strides = api.iface.compute_layout_strides(_full(api), 10, 4, api.iface.KVCacheLayout[layout],
                                               fixed_strides=(None, fixed, None, None, None))
    assert strides == expected, f"{layout}: strides (L, B, H, N, C) must be {expected}, got {strides}"


def test_padded_page_widens_the_inner_page_axis(target):
    """LBHNC, page 8192 padded to 10000: B (the inner of L and B) steps 10000, L 10 * 10000."""
    api = planning_api(target, "kv_cache_layouts")
    padded = dataclasses.replace(_full(api), page_size_padded=10000)
    strides = api.iface.compute_layout_strides(padded, 10, 4, api.iface.KVCacheLayout.LBHNC)
    assert strides == (100000, 10000, 4096, 256, 1)


def test_layout_traits_and_names(target):
    api = planning_api(target, "kv_cache_layouts")
    layout = api.iface.KVCacheLayout
    assert [m.name for m in layout if m.is_block_outermost] == ["BLHNC", "BLNHC", "BHLNC"]
    assert [m.name for m in layout if m.is_block_compact] == ["LBHNC", "LBNHC", "BLHNC", "BLNHC"]
    assert layout.BLHNC.layer_view_order == (0, 1, 2, 3), "B, H, N, C of one layer stay in order"


def test_layout_names_and_their_aliases(target):
    """The reference's `KVCacheLayout.from_name` (vLLM resolves the names in its cache config instead)."""
    layout = planning_api(target, "kv_cache_layouts", "layout_from_name").iface.KVCacheLayout
    assert layout.from_name("NHD") is layout.LBNHC and layout.from_name("HND") is layout.LBHNC
    with pytest.raises(ValueError, match="Unknown KV cache layout 'XYZ'; accepted: .*'LBHNC'"):
        layout.from_name("XYZ")


def _two_groups(api):
    # group 0: a (page 8192) + b (page 4096, one head) -> 12288 bytes per block; group 1: c (8192)
    specs = {"a": _full(api), "b": _full(api, heads=1)}
    uniform = api.iface.UniformTypeKVCacheSpecs(block_size=16, kv_cache_specs=specs)
    return [api.iface.KVCacheGroupSpec(["a", "b"], uniform), api.iface.KVCacheGroupSpec(["c"], _full(api))]


def test_block_outermost_packs_mixed_pages_into_one_block(target):
    """BLHNC: a block is the widest group's pages side by side (12288 bytes), groups overlay from byte 0."""
    api = planning_api(target, "kv_cache_layouts")
    config = api.planner.get_kv_cache_config_from_groups(api.config(kv_cache_layout="BLHNC"), _two_groups(api),
                                                         10 * 12288)
    assert config.num_blocks == 10
    assert [(list(t.layers), t.size, t.layer_stride, t.block_stride, t.offset) for t in config.kv_cache_tensors] == [
        (["a"], 122880, 8192, 12288, 0),     # a's page first in every block
        (["b"], 122880, 4096, 12288, 8192),  # b right after it
        (["c"], 122880, 8192, 12288, 0),     # group 1 overlays group 0 from byte 0
    ]


def test_layer_outermost_layout_rejects_several_groups_of_mixed_pages(target):
    api = planning_api(target, "kv_cache_layouts")
    with pytest.raises(ValueError, match="KV cache layout LBHNC cannot express this model's mixed page sizes"):
        api.planner.get_kv_cache_config_from_groups(api.config(kv_cache_layout="LBHNC"), _two_groups(api),
                                                    10 * 12288)


def test_unresolved_vllm_layout_is_an_error(target):
    """A vLLM-style cache config whose layout the engine core has not resolved: planning raises its error
    instead of guessing a layout."""
    api = planning_api(target, "kv_cache_layouts")
    config = api.config()

    def unresolved():
        raise ValueError("KV cache layout has not been resolved yet")

    config.cache_config.get_resolved_kv_cache_layout = unresolved
    with pytest.raises(ValueError, match="has not been resolved"):
        api.planner.get_kv_cache_config_from_groups(config, _two_groups(api), 10 * 12288)


def test_hisparse_hot_pages_share_the_aligned_block(target):
    """An MLA page of 64*128 = 8192 bytes aligned to 1152, beside a hot page of 5120: one block stride
    serves both, lcm(1152, 5120) = 46080; hot layers sit a page apart inside it."""
    api = planning_api(target, "kv_cache_layouts", "hisparse", "hisparse_packing")
    iface, layout_module = api.iface, target_module(target, "v1.hisparse.layout")
    mla = iface.MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=128, dtype=torch.uint8,
                                 block_stride_alignment=1152)
    hot = iface.HiSparseHotSpec(block_size=16, page_size=5120, blocks_per_request=2)
    groups = [iface.KVCacheGroupSpec(["attn"], mla), iface.KVCacheGroupSpec(["hot.0", "hot.1"], hot)]
    config = api.config(kv_cache_layout="BLHNC")
    # vLLM 0.31.0's planner reads no layout from the config here: its _pool_bytes_per_block takes the groups only.
    pool_bytes = api.planner._pool_bytes_per_block
    by_config = len(inspect.signature(pool_bytes).parameters) == 2
    assert (pool_bytes(config, groups) if by_config else pool_bytes(groups)) == 46080
    tensors = layout_module._build_hisparse_kv_cache_tensors(groups, 3, 3 * 46080, iface.KVCacheLayout.BLHNC, 46080)
    assert [(list(t.layers), t.layer_stride, t.block_stride, t.offset) for t in tensors] == [
        (["attn"], 8192, 46080, 0), (["hot.0", "hot.1"], 5120, 46080, 0)]
    with refused(target, ValueError, match="block-outermost", strict_match="got LBNHC"):
        layout_module._build_hisparse_kv_cache_tensors(groups, 3, 3 * 46080, iface.KVCacheLayout.LBNHC, 46080)


def test_mla_alignment_pads_the_page(target):
    """DeepSeek V4 MLA, 64 tokens x 584 bytes = 37376, aligned to 576: padded to 65 * 576 = 37440."""
    iface = planning_api(target, "mla_alignment").iface
    spec = iface.MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=584, dtype=torch.uint8, alignment=576)
    assert (spec.real_page_size_bytes, spec.page_size_bytes) == (37376, 37440)
    swa = iface.SlidingWindowMLASpec(block_size=64, num_kv_heads=1, head_size=584, dtype=torch.uint8,
                                     sliding_window=128, alignment=576)
    assert swa.page_size_bytes == 37440


def test_bounded_replay_and_replicated_state_keep_their_own_groups(target):
    """A bounded-replay SWA-MLA layer is never prefix-cached and does not share a group with a replaying
    one of the same window; a TP-replicated Mamba state does not share one with sharded states."""
    iface = planning_api(target, "bounded_replay", "mamba_tp_replicated").iface
    swa = dict(block_size=32, num_kv_heads=1, head_size=64, dtype=torch.uint8, sliding_window=128)
    bounded = iface.SlidingWindowMLASpec(bounded_replay=True, **swa)
    plain = iface.SlidingWindowMLASpec(**swa)
    assert (bounded.prefix_cacheable, bounded.prefix_replay_tokens) == (False, 128)
    assert (plain.prefix_cacheable, plain.prefix_replay_tokens) == (True, 0)
    assert not iface.UniformTypeKVCacheSpecs.is_uniform_type({"a": bounded, "b": plain})
    mamba = dict(block_size=16, shapes=((32,),), dtypes=(torch.bfloat16,))
    sharded, replicated = iface.MambaSpec(**mamba), iface.MambaSpec(tp_replicated=True, **mamba)
    assert iface.UniformTypeKVCacheSpecs.is_uniform_type({"a": sharded, "b": iface.MambaSpec(**mamba)})
    assert not iface.UniformTypeKVCacheSpecs.is_uniform_type({"a": sharded, "b": replicated})


def test_window_group_without_a_hit_nulls_what_it_skips(target):
    """A bounded-replay window group (bs 16, window 32) has no hit of its own. Adopting a 64-token hit of
    the other groups, it skips 64 - 32 + 1 = 33 tokens: two null blocks; it never registers blocks."""
    api = planning_api(target, "bounded_replay")
    swa = api.iface.SlidingWindowMLASpec(block_size=16, num_kv_heads=1, head_size=64, dtype=torch.uint8,
                                         sliding_window=32, bounded_replay=True)
    config = api.iface.KVCacheConfig(num_blocks=32, kv_cache_tensors=[], kv_cache_groups=[
        api.iface.KVCacheGroupSpec(["full"], _full(api)), api.iface.KVCacheGroupSpec(["swa"], swa)])
    manager = api.manager.KVCacheManager(config, max_model_len=256, hash_block_size=16, scheduler_block_size=16)
    window = manager.coordinator.single_type_managers[1]
    window.add_local_computed_blocks("r", [], num_local_computed_tokens=64, num_external_computed_tokens=0)
    assert window.req_to_blocks["r"] == [window._null_block] * 2
    request = target.make_request("r", list(range(80)), 16)
    assert len(request.block_hashes) == 5, "the request is hashed: 80 tokens, five 16-token blocks"
    window.cache_blocks(request, 80, replay_boundaries=())
    assert window.num_cached_block["r"] == 2, "a group outside prefix caching registers nothing"


def _aligned_states(iface, **kw):
    # float32 states of 3 and 5 elements (12 and 20 bytes)
    return iface.MambaSpec(block_size=16, shapes=((3,), (5,)), dtypes=(torch.float32,) * 2, **kw)


def test_mamba_states_start_on_the_state_alignment(target):
    """vLLM 0.34's `state_alignment`: float32 states of 3 and 5 elements (12 and 20 bytes) at alignment
    16 take 16 + 32 = 48 bytes, the second state starting at byte 16; a padded page must stay a multiple
    of it (AssertionError, as vLLM asserts)."""
    iface = planning_api(target, "mamba_state_alignment").iface
    spec = _aligned_states(iface, state_alignment=16)
    assert (spec.state_content_size_bytes, spec.real_page_size_bytes, spec.page_size_bytes) == (48, 48, 48)
    assert _aligned_states(iface).state_content_size_bytes == 32, "alignment 1: 12 + 20 bytes"
    with pytest.raises(AssertionError, match="page_size_padded must be aligned to state_alignment"):
        _aligned_states(iface, state_alignment=16, page_size_padded=49)
    assert _aligned_states(iface, state_alignment=16, page_size_padded=64).page_size_bytes == 64


def test_mamba_state_views_start_on_the_state_alignment(target):
    """The reference's tensors of that plan: 4 blocks of the 48-byte page, the 12-byte first state rounded
    up to 16, so the second state's view starts 16 bytes after the first's."""
    api = planning_api(target, "mamba_state_alignment")
    tensors = extension(target, "kv_tensors", "kvconform.kv_cache_tensors")
    spec = _aligned_states(api.iface, state_alignment=16)
    config = api.planner.get_kv_cache_config_from_groups(
        api.config(), [api.iface.KVCacheGroupSpec(["m"], spec)], 4 * 48)
    mem = tensors.KVCacheTensors(config, device="cpu")
    first, second = mem.kv_cache_view("m")
    assert (first.shape, second.shape) == ((4, 3), (4, 5))
    assert second.data_ptr() - first.data_ptr() == 16, "the 12-byte first state is rounded up to 16"


def test_mamba_layers_share_a_group_by_page_not_by_shape(target):
    """Mamba layers of different state shapes but one page (8+12+4+4+4 and 8+12+1x4+4+4 floats) and one
    state alignment share a block table; another state alignment does not."""
    iface = planning_api(target, "mamba_state_alignment").iface
    spec = iface.MambaSpec(block_size=2, shapes=((8,), (12,), (4,), (4,), (4,)), dtypes=(torch.float32,) * 5)
    other = iface.MambaSpec(block_size=2, shapes=((8,), (12,), (1, 4), (4,), (4,)), dtypes=(torch.float32,) * 5)
    assert other.page_size_bytes == spec.page_size_bytes == 128
    assert spec.is_uniform_with_collection({"first": spec, "second": other})
    aligned = iface.MambaSpec(block_size=2, shapes=((8,), (12,), (4,), (4,), (4,)), dtypes=(torch.float32,) * 5,
                              state_alignment=16, page_size_padded=128)
    assert aligned.page_size_bytes == 128
    assert not spec.is_uniform_with_collection({"first": spec, "second": aligned})
    assert not iface.UniformTypeKVCacheSpecs.is_uniform_type({"first": spec, "second": aligned})


def _two_layer_tensor(iface, layer_stride, block_stride, offset):
    # size: both layers' 3 blocks of 256 bytes after `offset` bytes
    return iface.KVCacheTensor(size=offset + 1536, layers=["a", "b"], layer_stride=layer_stride,
                               block_stride=block_stride, offset=offset)


def _fp16_attention(iface):
    # block 4, 2 KV heads, head size 8, fp16: H 2, N 4, C (8 K + 8 V) * 2 = 32 bytes; page 2 * 4 * 32 = 256
    return iface.FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8, dtype=torch.float16)


def test_layer_views_of_a_planned_tensor_address_its_bytes(target):
    """LBHNC, 2 layers x 3 blocks of 256 bytes from byte 64: each layer is a [3, 2, 4, 16] fp16 view, strides
    (B 256, H 128, N 32, C 2 bytes) = (128, 64, 16, 1) elements, layer b from byte 64 + 768 = 832 (element 416).
    Layer b's block 2, head 1, token 3 is bytes 832 + 2 * 256 + 128 + 3 * 32 = 1568 .. 1600, the last 32."""
    iface = planning_api(target, "kv_cache_layouts", "strided_kv_cache_tensors", "kv_cache_views").iface
    raw = torch.zeros(1600, dtype=torch.int8)
    views = iface.create_kv_cache_views(raw, _fp16_attention(iface), 3, iface.KVCacheLayout.LBHNC,
                                        _two_layer_tensor(iface, 768, 256, 64))
    assert [(tuple(v.shape), v.stride(), v.storage_offset(), v.dtype) for v in views] == [
        ((3, 2, 4, 16), (128, 64, 16, 1), 32, torch.float16), ((3, 2, 4, 16), (128, 64, 16, 1), 416, torch.float16)]
    views[1][2, 1, 3] = 7.0
    assert (raw[1568:1600].view(torch.float16) == 7.0).all(), "the token's 16 fp16 values end the tensor"
    assert not raw[:1568].any(), "nothing else is written"


def test_block_outermost_views_interleave_the_layers(target):
    """BLHNC: a block holds both layers' pages side by side (block stride 512, layer stride 256): bytes
    [512 b + 256 l, 512 b + 256 (l + 1)) are layer l's block b."""
    iface = planning_api(target, "kv_cache_layouts", "strided_kv_cache_tensors", "kv_cache_views").iface
    raw = torch.zeros(1536, dtype=torch.int8)
    views = iface.create_kv_cache_views(raw, _fp16_attention(iface), 3, iface.KVCacheLayout.BLHNC,
                                        _two_layer_tensor(iface, 256, 512, 0))
    for layer, view in enumerate(views):
        view.fill_(layer + 1)
    pages = raw.view(torch.float16).view(3, 2, 128)  # (block, layer, the page's 128 fp16 values)
    assert (pages[:, 0] == 1).all() and (pages[:, 1] == 2).all()


def test_kernel_blocks_split_dense_pages_only(target):
    """Kernel blocks of 2 tokens in the LBHNC tensor above: each 256-byte block is two 128-byte kernel pages,
    [6, 2, 2, 16] per layer with strides (64, 32, 16, 1) elements; grouped back by block: [3, 2, 2, 2, 16].
    A block-outermost block (stride 512, not the 256-byte page) cannot be split."""
    iface = planning_api(target, "kv_cache_layouts", "strided_kv_cache_tensors", "kv_cache_views").iface
    raw = torch.zeros(1600, dtype=torch.int8)
    spec = _fp16_attention(iface)
    views = iface.create_kv_cache_views(raw, spec, 3, iface.KVCacheLayout.LBHNC,
                                        _two_layer_tensor(iface, 768, 256, 64), kernel_block_size=2)
    assert [(tuple(v.shape), v.stride(), v.storage_offset()) for v in views] == [
        ((6, 2, 2, 16), (64, 32, 16, 1), 32), ((6, 2, 2, 16), (64, 32, 16, 1), 416)]
    assert tuple(iface.group_kernel_blocks(views[0], 3).shape) == (3, 2, 2, 2, 16)
    assert iface.group_kernel_blocks(views[0], 6) is views[0], "already one entry per block"
    with pytest.raises(ValueError, match="kernel block"):
        iface.create_kv_cache_views(torch.zeros(1536, dtype=torch.int8), spec, 3, iface.KVCacheLayout.BLHNC,
                                    _two_layer_tensor(iface, 256, 512, 0), kernel_block_size=2)


def test_state_layer_views_are_bytes(target):
    """A Mamba layer (one float32 state of 4 values: a 16-byte page) has no single dtype: its view is the raw
    bytes, [blocks, 1 head, 1 state, 16]."""
    iface = planning_api(target, "kv_cache_layouts", "strided_kv_cache_tensors", "kv_cache_views").iface
    spec = iface.MambaSpec(block_size=16, shapes=((4,),), dtypes=(torch.float32,))
    tensor = iface.KVCacheTensor(size=48, layers=["m"], layer_stride=48, block_stride=16)
    (view,) = iface.create_kv_cache_views(torch.zeros(48, dtype=torch.int8), spec, 3, iface.KVCacheLayout.LBHNC,
                                          tensor)
    assert (tuple(view.shape), view.stride(), view.dtype) == ((3, 1, 1, 16), (16, 16, 16, 1), torch.int8)


@pytest.mark.parametrize("max_blocks,block_size,alignment,width", [
    (10, 16, 128, 16),    # 8 blocks of 16 span 128 tokens: 10 -> 16
    (10, 48, 128, 16),    # 48 * 8 = 384 = 3 * 128 is the first whole tile: 8 blocks, 10 -> 16
    (10, 256, 128, 10),   # every block is two tiles already
    (16, 16, 128, 16),    # already a whole number of tiles
    (10, 16, None, 10),   # no alignment
    (5, 16, 64, 8),       # 4 blocks of 16 span 64 tokens: 5 -> 8
])
def test_block_table_rows_are_widened_to_whole_token_tiles(target, max_blocks, block_size, alignment, width):
    iface = planning_api(target, "block_table_width").iface
    assert iface.get_block_table_width(max_blocks, block_size, token_alignment=alignment) == width
    with refused(target, ValueError, match="token_alignment", strict_match="got 0"):
        iface.get_block_table_width(max_blocks, block_size, token_alignment=0)
