"""Spec section 3: layer specs to groups, page unification, one shared pool, HMA-off promotion (the
reference's `kv_cache_planning`, vLLM 0.33's planner; the era styles are the config resolver's stage)."""

import pytest
import torch

from suites.allocator.conftest import require

SECTION = "3"


@pytest.fixture
def kv(target):
    """The reference kv_cache package and its planner, for targets that expose layer grouping."""
    require(target, "grouping")
    from reference_impl import kv_cache
    from reference_impl.kv_cache import kv_cache_planning
    return kv_cache, kv_cache_planning


def _cfg(kv_cache_planning, **kw):
    return kv_cache_planning.planning_config(**kw)


def _attn(kv, cls, heads_dim, **kw):
    return cls(block_size=16, num_kv_heads=2, head_size=heads_dim, dtype=torch.float32, **kw)


@pytest.mark.parametrize("n_full,n_swa,expected", [
    (2, 4, [["l1", "l2"], ["l3", "l5"], ["l4", "l6"]]),
    (3, 7, [["l1", "l2", "l3"], ["l4", "l7", "l10"], ["l5", "l8"], ["l6", "l9"]]),
    (6, 5, [["l1", "l2", "l3", "l4", "l5", "l6"], ["l7", "l8", "l9", "l10", "l11"]]),
])
def test_uniform_page_grouping(kv, n_full, n_swa, expected):
    mod, grouping = kv
    specs = {f"l{i + 1}": _attn(mod, mod.FullAttentionSpec, 64) for i in range(n_full)}
    specs.update({f"l{n_full + i + 1}": _attn(mod, mod.SlidingWindowSpec, 64, sliding_window=128)
                  for i in range(n_swa)})
    groups = grouping.get_kv_cache_groups(_cfg(grouping), specs)
    assert [g.layer_names for g in groups] == expected, f"{n_full} full + {n_swa} SWA group as {expected}"


def test_page_unification_grows_block_sizes(kv):
    mod, grouping = kv
    specs = {"a": _attn(mod, mod.FullAttentionSpec, 64), "b": _attn(mod, mod.SlidingWindowSpec, 32, sliding_window=64),
             "c": _attn(mod, mod.SlidingWindowSpec, 16, sliding_window=64)}
    out = grouping.unify_kv_cache_spec_page_size(specs)
    assert [out[k].block_size for k in "abc"] == [16, 32, 64], "SWA h32 and h16 grow to block sizes 32 and 64"
    assert {out[k].page_size_bytes for k in "abc"} == {16384}, "every page becomes 16384 bytes"


def test_page_unification_pads_full_and_mamba(kv):
    mod, grouping = kv
    out = grouping.unify_kv_cache_spec_page_size(
        {"f": _attn(mod, mod.FullAttentionSpec, 64), "s": _attn(mod, mod.SlidingWindowSpec, 96, sliding_window=64)})
    assert (out["f"].block_size, out["f"].page_size_bytes) == (16, 24576), "full h64 is padded to SWA h96's page"
    mamba = mod.MambaSpec(block_size=16, shapes=((1024,),), dtypes=(torch.float32,))
    out = grouping.unify_kv_cache_spec_page_size({"f": _attn(mod, mod.FullAttentionSpec, 64), "m": mamba})
    assert out["m"].page_size_bytes == 16384 and out["m"].block_size == 16, "Mamba page 4096 padded to 16384"


def test_one_pool_overlaid_from_byte_0(kv):
    mod, grouping = kv
    specs = {f"l{i}": _attn(mod, mod.FullAttentionSpec, 64) for i in range(2)}
    specs.update({f"s{i}": _attn(mod, mod.SlidingWindowSpec, 64, sliding_window=64) for i in range(4)})
    groups = grouping.get_kv_cache_groups(_cfg(grouping), specs)
    config = grouping.get_kv_cache_config_from_groups(_cfg(grouping), groups, 3_276_800)
    assert config.num_blocks == 100, "3,276,800 bytes / (2 layers x 16384) = 100 blocks"
    assert [(t.size, len(t.layers), t.layer_stride, t.block_stride, t.offset) for t in config.kv_cache_tensors] \
        == [(3_276_800, 2, 1_638_400, 16384, 0)] * 3, "three tensors overlaying one allocation from byte 0"
    from reference_impl.kv_cache.tensors import KVCacheTensors
    mem = KVCacheTensors(config, device="cpu")
    mem.fill_block("l0", 5, 7)
    assert mem.block_bytes("s0", 5)[:4] == bytes([7] * 4), "block 5 of group 0 aliases block 5 of the SWA groups"
    data = torch.ones(mem.block_shape("l1"), dtype=torch.float32)
    mem.write_block("l1", 3, data)
    assert torch.equal(mem.read_block("l1", 3), data), "write/read of one block round-trips"


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
def test_hma_disabled_promotion_and_era_errors(kv, caplog, era, kinds, groups, warned, error):
    from reference_impl.config import kv_cache_groups as grouping
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


def test_resolve_groups_hma_on_keeps_types(kv):
    from reference_impl.config import kv_cache_groups as grouping
    summary, warnings = grouping.resolve_groups(["full", "sliding_window", "mamba"], False, "v0.33")
    assert [g["kind"] for g in summary] == ["full", "sliding_window", "mamba"] and warnings == [], \
        "with HMA on every type keeps its own group and nothing is logged"
