"""Bad input: clear ValueErrors naming the field; state stays consistent afterwards."""

import pytest
import torch

from harness.targets.allocator.target import GroupDesc
from suites.allocator.conftest import require
from suites.allocator.helpers import planning_api, refused

SECTION = "bad-input"


@pytest.fixture
def strict(target):
    """The target, when it validates input strictly (vLLM's allocator does not)."""
    require(target, "strict_input_validation")
    return target


def test_non_positive_block_size(strict):
    with pytest.raises(ValueError, match="block_size must be a positive integer, got 0"):
        strict.make_manager([GroupDesc("full", 0)], 16, 100)


def test_window_larger_than_model_length(strict):
    with pytest.raises(ValueError, match=r"sliding_window \(256\) exceeds max_model_len \(128\)"):
        strict.make_manager([GroupDesc("sliding_window", 16, sliding_window=256)], 16, 128)


def test_zero_blocks(strict):
    with pytest.raises(ValueError, match="num_blocks must be an integer >= 1"):
        strict.make_manager([GroupDesc("full", 16)], 0, 100)
    with pytest.raises(ValueError, match="num_gpu_blocks must be an integer >= 1"):
        strict.make_block_pool(0, True, 16)


def test_page_sizes_that_cannot_be_unified(target):
    api = planning_api(target)
    # vLLM 0.33 pads a non-MLA page that does not divide the largest, but never an MLA page (sparse MLA
    # reads whole token rows), and 0.13 pads none: an MLA page of 3072 bytes beside a 16384-byte Mamba state
    # (an attention page of head size 64) cannot be unified (and MLA with full attention would share one
    # same-type group instead).
    mla = api.iface.MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=48, dtype=torch.float32)
    specs = {"a": api.spec("mamba", head_size=64, dtype="float32"), "b": mla}
    with refused(target, NotImplementedError, match="not divisible by the maximum page size",
                 strict_match="^Layer b: "):
        api.planner.get_kv_cache_groups(api.config(), specs)


def test_append_past_max_model_len(strict):
    m = strict.make_manager([GroupDesc("full", 4)], 8, 10)
    a = strict.make_request("a", list(range(8)), 4)
    m.allocate_slots(a, 8)
    a.num_computed_tokens = 8
    before = [list(g) for g in m.get_block_ids("a")]
    with pytest.raises(ValueError, match=r"exceeds max_model_len \(10\)"):
        m.allocate_slots(a, 3)
    assert [list(g) for g in m.get_block_ids("a")] == before, "a refused allocation leaves the table as it was"


def test_unknown_kv_cache_dtype_name(strict):
    """vLLM maps a name outside its table to no quantization; a strict target refuses it, naming the accepted."""
    iface = planning_api(strict, "kv_quant_modes").iface
    with pytest.raises(ValueError, match=r"kv_cache_dtype 'fp9' is not a KV cache dtype .*accepted: \['auto', "):
        iface.get_kv_quant_mode("fp9")


def test_views_need_a_flat_byte_buffer(strict):
    iface = planning_api(strict, "kv_cache_views").iface
    spec = iface.FullAttentionSpec(block_size=4, num_kv_heads=2, head_size=8, dtype=torch.float16)
    tensor = iface.KVCacheTensor(size=256, layers=["a"], layer_stride=256, block_stride=256)
    with pytest.raises(ValueError, match=r"raw must be a flat tensor of one-byte elements, got shape \(128,\) of "
                                         r"torch.float16"):
        iface.create_kv_cache_views(torch.zeros(128, dtype=torch.float16), spec, 1, iface.KVCacheLayout.LBHNC, tensor)
