"""Spec section 3: layer specs to groups, page unification, one shared pool, HMA-off promotion, on the
target's own planner (`kv_cache_planning`; `kv_cache_utils` before 0.33) with its own spec classes, reached
through the target (`planning_api`). The era styles of HMA-off errors are the config resolver's stage, and
the tensors allocated from a plan the reference's: kvconform extensions, N/A on vLLM by capability. Last, the
quantization mode a KV cache dtype name gives the attention specs."""

import dataclasses

import pytest

from suites.allocator.helpers import extension, planning_api, refused

SECTION = "3"


def _attn(api, kind="full", head_size=64, **kw):
    # block 16, 2 KV heads, float32: page 2 x 16 x 2 x head_size x 4 bytes (16384 at head size 64)
    return api.spec(kind, head_size=head_size, dtype="float32", **kw)


@pytest.mark.parametrize("n_full,n_swa,expected", [
    (2, 4, [["l1", "l2"], ["l3", "l5"], ["l4", "l6"]]),
    (3, 7, [["l1", "l2", "l3"], ["l4", "l7", "l10"], ["l5", "l8"], ["l6", "l9"]]),
    (6, 5, [["l1", "l2", "l3", "l4", "l5", "l6"], ["l7", "l8", "l9", "l10", "l11"]]),
])
def test_uniform_page_grouping(target, n_full, n_swa, expected):
    api = planning_api(target)
    specs = {f"l{i + 1}": _attn(api) for i in range(n_full)}
    specs.update({f"l{n_full + i + 1}": _attn(api, "sliding_window", sliding_window=128) for i in range(n_swa)})
    groups = api.planner.get_kv_cache_groups(api.config(), specs)
    assert [g.layer_names for g in groups] == expected, f"{n_full} full + {n_swa} SWA group as {expected}"


def test_page_unification_grows_block_sizes(target):
    api = planning_api(target)
    specs = {"a": _attn(api), "b": _attn(api, "sliding_window", 32, sliding_window=64),
             "c": _attn(api, "sliding_window", 16, sliding_window=64)}
    out = api.planner.unify_kv_cache_spec_page_size(specs)
    assert [out[k].block_size for k in "abc"] == [16, 32, 64], "SWA h32 and h16 grow to block sizes 32 and 64"
    assert {out[k].page_size_bytes for k in "abc"} == {16384}, "every page becomes 16384 bytes"


def _strided_backend(spec):
    # Releases with AttentionSpec.indexes_kv_by_block_stride (0.24-0.28) pad an attention page only for a
    # backend that opts in (it reads padded pages through the block stride); the scenario's backend does.
    if "indexes_kv_by_block_stride" in {f.name for f in dataclasses.fields(spec)}:
        return dataclasses.replace(spec, indexes_kv_by_block_stride=True)
    return spec


def test_page_unification_pads_full_and_mamba(target):
    api = planning_api(target, "page_padding")
    out = api.planner.unify_kv_cache_spec_page_size(
        {"f": _strided_backend(_attn(api)), "s": _attn(api, "sliding_window", 96, sliding_window=64)})
    assert (out["f"].block_size, out["f"].page_size_bytes) == (16, 24576), "full h64 is padded to SWA h96's page"
    # a Mamba state of an attention page at head size 16: 2 x 16 x 2 x 16 x 4 = 4096 bytes
    out = api.planner.unify_kv_cache_spec_page_size({"f": _attn(api), "m": _attn(api, "mamba", 16)})
    assert out["m"].page_size_bytes == 16384 and out["m"].block_size == 16, "Mamba page 4096 padded to 16384"


def _one_pool(api):
    # 2 full + 4 SWA layers of one page (16384 bytes): three groups of two layers, planned on 3,276,800 bytes
    specs = {f"l{i}": _attn(api) for i in range(2)}
    specs.update({f"s{i}": _attn(api, "sliding_window", sliding_window=64) for i in range(4)})
    groups = api.planner.get_kv_cache_groups(api.config(), specs)
    return api.planner.get_kv_cache_config_from_groups(api.config(), groups, 3_276_800)


def test_one_pool_overlaid_from_byte_0(target):
    api = planning_api(target, "strided_kv_cache_tensors")
    config = _one_pool(api)
    assert config.num_blocks == 100, "3,276,800 bytes / (2 layers x 16384) = 100 blocks"
    assert [(t.size, len(t.layers), t.layer_stride, t.block_stride, t.offset) for t in config.kv_cache_tensors] \
        == [(3_276_800, 2, 1_638_400, 16384, 0)] * 3, "three tensors overlaying one allocation from byte 0"


def test_planned_tensors_alias_across_groups(target):
    """The reference's tensors allocated from that plan: block 5 of group 0 is block 5 of the SWA groups."""
    api = planning_api(target, "strided_kv_cache_tensors")
    tensors = extension(target, "kv_tensors", "kvconform.kv_cache_tensors")
    import torch

    mem = tensors.KVCacheTensors(_one_pool(api), device="cpu")
    mem.fill_block("l0", 5, 7)
    assert mem.block_bytes("s0", 5)[:4] == bytes([7] * 4), "block 5 of group 0 aliases block 5 of the SWA groups"
    data = torch.ones(mem.block_shape("l1"), dtype=torch.float32)
    mem.write_block("l1", 3, data)
    assert torch.equal(mem.read_block("l1", 3), data), "write/read of one block round-trips"


@pytest.mark.parametrize("kinds,promoted", [
    (["full", "sliding_window", "full", "sliding_window"], True),
    (["full", "mamba"], False),
])
def test_hma_off_promotes_window_layers_or_refuses(target, kinds, promoted):
    """HMA disabled: sliding-window layers beside full attention become full attention (one group of every
    layer); full attention beside Mamba cannot be one type, a ValueError (its text is the release's own)."""
    api = planning_api(target)
    shape = {"sliding_window": dict(sliding_window=128), "mamba": dict(head_size=16)}
    specs = {f"l{i}": _attn(api, kind, **shape.get(kind, {})) for i, kind in enumerate(kinds)}
    config = api.config(disable_hybrid_kv_cache_manager=True)
    if not promoted:
        with pytest.raises(ValueError, match="unified type"):
            api.planner.get_kv_cache_groups(config, specs)
        return
    groups = api.planner.get_kv_cache_groups(config, specs)
    assert [sorted(g.layer_names) for g in groups] == [["l0", "l1", "l2", "l3"]], "one group of every layer"
    spec = groups[0].kv_cache_spec
    layer_specs = getattr(spec, "kv_cache_specs", {"l0": spec}).values()  # one spec, or one per layer
    assert all(isinstance(s, api.iface.FullAttentionSpec) for s in layer_specs), \
        "every window layer promoted to full attention"


@pytest.mark.parametrize("era,kinds,groups,warned,error", [
    ("seed", ["full", "sliding_window"], [("full", [0, 1])], True, None),
    ("v0.33", ["full", "sliding_window"], [("full", [0, 1])], True, None),
    ("seed", ["full", "full"], [("full", [0, 1])], False, None),
    ("seed", ["full", "mamba"], None, True,
     "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one unified type."),
    ("v0.33", ["full", "mamba"], None, False, "Failed to promote local KV cache specs to one unified type."),
    ("v0.33", ["sliding_window", "chunked_local"], None, False,
     "Failed to promote local KV cache specs to one unified type."),
])
def test_hma_disabled_promotion_and_era_errors(target, caplog, era, kinds, groups, warned, error):
    grouping = extension(target, "era_grouping", "kvconform.kv_cache_groups")
    if error:
        with caplog.at_level("WARNING"):
            with pytest.raises(ValueError) as info:
                grouping.resolve_groups(kinds, True, era)
        assert str(info.value) == error, f"{era}: exact error text"
        assert any("Hybrid KV cache manager is disabled for this hybrid model" in r.message
                   for r in caplog.records) == warned, f"{era}: W-U logged before the error: {warned}"
        return
    summary, warnings = grouping.resolve_groups(kinds, True, era)
    assert [(g["kind"], g["layers"]) for g in summary] == groups, f"{era}: promoted to one full-attention group"
    assert bool(warnings) == warned, f"{era}: W-U returned only when specs changed ({warned})"


def test_resolve_groups_hma_on_keeps_types(target):
    grouping = extension(target, "era_grouping", "kvconform.kv_cache_groups")
    summary, warnings = grouping.resolve_groups(["full", "sliding_window", "mamba"], False, "v0.33")
    assert [g["kind"] for g in summary] == ["full", "sliding_window", "mamba"] and warnings == [], \
        "with HMA on every type keeps its own group and nothing is logged"


def _two_layer_config(api, max_model_len, num_blocks):
    """A worker config of one group of two full-attention layers (page 2 x 16 x (64 + 64) x 4 = 16384
    bytes, so a block is 32768 bytes) holding `num_blocks` blocks, and the config it was planned with."""
    cfg = api.config(max_model_len=max_model_len, kv_cache_layout="LBNHC")
    groups = [api.iface.KVCacheGroupSpec(["l0", "l1"], _attn(api))]
    return cfg, api.planner.get_kv_cache_config_from_groups(cfg, groups, num_blocks * 32768)


def test_shrink_to_the_measured_block_count(target):
    """vLLM 0.34's extensible KV cache: 16 reserved blocks shrink to 10, each device tensor to 10/16 of
    its size with strides kept; a host-resident tensor stays; 4 blocks cannot serve max_model_len 64 (4
    blocks of 16 tokens plus the null block), 5 can."""
    api = planning_api(target, "extensible_kv_cache")
    cfg, config = _two_layer_config(api, 64, 16)
    assert config.num_blocks == 16
    host = api.iface.KVCacheTensor(size=48000, layers=("host.0",), layer_stride=48000, block_stride=3000,
                                   host_resident=True)
    config.kv_cache_tensors.insert(0, host)
    before = list(config.kv_cache_tensors)
    api.planner.shrink_kv_cache_configs(cfg, [config], 10)
    assert config.num_blocks == 10
    assert config.kv_cache_tensors[0] == host, "the host pool keeps its own block count"
    # 16 blocks x 32768 bytes = 524288; 10/16 of it = 327680, strides unchanged
    assert [(t.size, t.layer_stride, t.block_stride) for t in config.kv_cache_tensors[1:]] == \
        [(327680, b.layer_stride, b.block_stride) for b in before[1:]]
    with pytest.raises(ValueError, match="max seq len"):
        api.planner.shrink_kv_cache_configs(cfg, [config], 4)
    api.planner.shrink_kv_cache_configs(cfg, [config], 5)
    assert config.num_blocks == 5
    with refused(target, strict_match="num_blocks 6 exceeds the config's 5"):  # more blocks than it holds
        api.planner.shrink_kv_cache_configs(cfg, [config], 6)


def test_finalize_takes_the_smallest_measured_count(target):
    """Two ranks measure 999 and 997 blocks of a 1000-block reservation (one unmeasured): 997 becomes
    every config's count and `cache_config.num_gpu_blocks`, not rounded; nothing measured keeps 1000."""
    from types import SimpleNamespace

    api = planning_api(target, "extensible_kv_cache")
    cfg, config = _two_layer_config(api, 64, 1000)
    scheduler = api.utils.generate_scheduler_kv_cache_config([config])
    measured = [SimpleNamespace(num_kv_blocks=n) for n in (999, None, 997)]
    assert api.planner.finalize_extensible_kv_cache(cfg, [config], scheduler, measured) == 997
    assert config.num_blocks == scheduler.num_blocks == cfg.cache_config.num_gpu_blocks == 997
    assert api.planner.finalize_extensible_kv_cache(cfg, [config], scheduler, []) == 997


def test_finalize_refits_an_auto_max_model_len(target):
    """max_model_len auto (-1), fitted to 256 tokens on 32 reserved blocks: warmup leaves 9 blocks, 8 of
    them usable (the null block), so the length is fitted again to 8 x 16 = 128; 1 block fits nothing."""
    from types import SimpleNamespace

    api = planning_api(target, "extensible_kv_cache")
    cfg, config = _two_layer_config(api, 256, 32)
    cfg.model_config.original_max_model_len = -1
    scheduler = api.utils.generate_scheduler_kv_cache_config([config])
    api.planner.finalize_extensible_kv_cache(cfg, [config], scheduler, [SimpleNamespace(num_kv_blocks=9)])
    assert (cfg.model_config.max_model_len, config.num_blocks) == (128, 9)
    with pytest.raises(ValueError, match="CUDA graph capture and warmup left no memory"):
        api.planner.finalize_extensible_kv_cache(cfg, [config], scheduler, [SimpleNamespace(num_kv_blocks=1)])


def test_pipeline_stage_places_only_its_own_layers(target):
    """A stage owning only layer2 of the same-type group {layer1, layer2} and nothing of {layer3} keeps
    the global specs (vLLM 0.34) but places one tensor, for layer2."""
    api = planning_api(target, "stage_projection", "kv_cache_layouts")
    uniform = api.iface.UniformTypeKVCacheSpecs
    spec_a, spec_b = _attn(api), _attn(api, head_size=32)
    global_groups = [
        api.iface.KVCacheGroupSpec(["layer1", "layer2"], uniform(
            block_size=16, kv_cache_specs={"layer1": spec_a, "layer2": spec_a})),
        api.iface.KVCacheGroupSpec(["layer3"], uniform(block_size=16, kv_cache_specs={"layer3": spec_b})),
    ]
    groups = api.planner._project_kv_cache_groups_to_worker(global_groups, {"layer2": spec_a})
    assert [g.layer_names for g in groups] == [["layer2"], []]
    config = api.planner.get_kv_cache_config_from_groups(api.config(kv_cache_layout="BLHNC"), groups, 2**20)
    assert [list(t.layers) for t in config.kv_cache_tensors] == [["layer2"]]


# (worker 0's second layer dtype, worker 1's second layer dtype, zeroing on every worker): the other layer of
# each worker is float32. Mixed precision on one worker (a reused block would decode another format's stale
# bytes) makes it need zeroing, and every worker zeroes the block ids of the one scheduler, so all must agree.
ZEROING_ACROSS_WORKERS = [("float32", "float32", False), ("float16", "float32", True), ("float32", "float16", True)]


@pytest.mark.parametrize("first,second,expected", ZEROING_ACROSS_WORKERS)
def test_zeroing_is_resolved_across_pipeline_stages(target, first, second, expected):
    """Two pipeline stages of two full-attention layers each; only one stage may mix precisions. vLLM
    0.34's get_kv_cache_configs sets one answer on every stage's config (and the scheduler's copy keeps
    it), while a config built for the uniform stage alone does not need zeroing."""
    api = planning_api(target, "stage_projection", "kv_cache_zeroing_resolved")
    config = api.config(max_model_len=128, kv_cache_layout="LBNHC")
    specs = [{"layer_0": _attn(api), "layer_1": api.spec("full", head_size=64, dtype=first)},
             {"layer_2": _attn(api), "layer_3": api.spec("full", head_size=64, dtype=second)}]
    groups = api.planner.get_global_kv_cache_groups(config, specs)
    configs = api.planner.get_kv_cache_configs(config, specs, [2**20, 2**20], groups)
    assert [c.needs_kv_cache_zeroing for c in configs] == [expected, expected], \
        f"stage dtypes float32+{first} and float32+{second}: zeroing {expected} on both stages"
    assert api.utils.generate_scheduler_kv_cache_config(configs).needs_kv_cache_zeroing is expected
    alone = api.planner.get_kv_cache_config_from_groups(config, configs[1].kv_cache_groups, 2**20)
    assert alone.needs_kv_cache_zeroing is (second == "float16"), \
        f"stage 1 planned alone (float32+{second}) needs zeroing only if it mixes precisions itself"


# Reviewed data: KV cache dtype names every release with the quant-mode table (0.20.0 on) maps alike (by member
# name: the numbers moved when INT4_PER_TOKEN_HEAD was added), with (quantized, per-token-head scales).
_QUANT_MODES = {
    "auto": ("NONE", False, False),
    "bfloat16": ("NONE", False, False),
    "fp8": ("FP8_PER_TENSOR", True, False),
    "fp8_e5m2": ("FP8_PER_TENSOR", True, False),
    "fp8_per_token_head": ("FP8_PER_TOKEN_HEAD", True, True),
    "int8_per_token_head": ("INT8_PER_TOKEN_HEAD", True, True),
    "nvfp4": ("NVFP4", True, False),
}


@pytest.mark.parametrize("dtype_name", sorted(_QUANT_MODES))
def test_kv_cache_dtype_names_have_a_quant_mode(target, dtype_name):
    """The quantization mode attention specs carry (`kv_quant_mode`), from the `--kv-cache-dtype` name."""
    iface = planning_api(target, "kv_quant_modes").iface
    mode, quantized, per_token_head = _QUANT_MODES[dtype_name]
    assert iface.get_kv_quant_mode(dtype_name).name == mode
    assert iface.is_quantized_kv_cache(dtype_name) is quantized
    assert iface.kv_cache_uses_per_token_head_scales(dtype_name) is per_token_head
