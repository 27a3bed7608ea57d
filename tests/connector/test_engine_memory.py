"""The mini engine's KV memory: the allocator's config builder and tensors, seen through the connector API."""

from __future__ import annotations

import pytest
import torch

from reference_impl.engine.presets import get_preset
from reference_impl.kv_cache.tensors import KVCacheTensors

NUM_BLOCKS = 12


@pytest.fixture
def hybrid():
    """fa+swa+mamba at 12 blocks: groups full, swa, mamba of 2 layers each (16 tokens x 2 heads x 8 fp16)."""
    config = get_preset("fa+swa+mamba").kv_cache_config(NUM_BLOCKS)
    return config, KVCacheTensors(config, device="cpu")


def test_groups_follow_the_preset(hybrid):
    config, _ = hybrid
    names = [g.layer_names for g in config.kv_cache_groups]
    assert names == [["model.layers.0.full", "model.layers.1.full"], ["model.layers.2.swa", "model.layers.3.swa"],
                     ["model.layers.4.mamba", "model.layers.5.mamba"]], f"one group per preset group, in order: {names}"
    # page: 16 tokens x 2 heads x 2 (K, V) x 8 x 2 bytes = 1024 bytes; 2 layers per group.
    assert [(t.size, t.offset) for t in config.kv_cache_tensors] == [(2 * 1024 * NUM_BLOCKS, 0)] * 3, \
        "three group tensors of 2 layers x 1024-byte pages, all at byte 0 of the pool"


def test_connector_view_shapes(hybrid):
    _, memory = hybrid
    views = memory.kv_caches()
    full = views["model.layers.0.full"]
    assert (tuple(full.shape), full.dtype) == ((NUM_BLOCKS, 16, 2, 16), torch.float16), \
        "attention layers are [num_blocks, block_size, num_kv_heads, 2 * head_size] in the layer dtype"
    mamba = views["model.layers.4.mamba"]
    assert [tuple(s.shape) for s in mamba] == [(NUM_BLOCKS, 4, 8), (NUM_BLOCKS, 8, 4)], \
        "a Mamba layer is one [num_blocks, *shape] tensor per state"


def test_groups_overlay_the_same_bytes(hybrid):
    _, memory = hybrid
    views = memory.kv_caches()
    views["model.layers.0.full"][5].fill_(1.5)
    swa = views["model.layers.2.swa"][5]
    assert torch.equal(swa, torch.full_like(swa, 1.5)), "block 5 of layer 0 (full) is block 5 of layer 0 (swa)"
    state = views["model.layers.4.mamba"][0][5]
    assert torch.equal(state, torch.full_like(state, 1.5)), "and the first Mamba state of block 5 (from byte 0)"
    assert memory.block_bytes("model.layers.1.full", 5) == bytes(1024), "the second layer of a group is apart"


def test_mismatched_pages_are_refused():
    with pytest.raises(ValueError, match="fa16\\+swa32 at tensor_parallel_size 2: groups must share one page size"):
        get_preset("fa16+swa32").kv_cache_config(NUM_BLOCKS, tp_size=2)


def test_group_layers_as_one_view(hybrid):
    """The connector's fast copy path sees a group's layers as one [layers, rows, words] view of the pool."""
    from reference_impl.connector.lmcache_like import layers_as_one_view

    _, memory = hybrid
    views = memory.kv_caches()
    layers = [views["model.layers.2.swa"], views["model.layers.3.swa"]]
    layers[1][7].fill_(2.0)
    joined = layers_as_one_view(layers)
    assert joined is not None and joined.dtype == torch.int64, "1024-byte rows copy as 8-byte words"
    assert tuple(joined.shape) == (2, NUM_BLOCKS, 128), "2 layers x 12 blocks x 1024 / 8 words"
    assert torch.equal(joined[1, 7].view(torch.float16), layers[1][7].reshape(-1)), "row 7 of layer 1 is block 7"
    assert joined[0, 7].count_nonzero() == 0, "layer 0 is a different region of the pool"


def test_separate_allocations_take_the_per_layer_path():
    from reference_impl.connector.lmcache_like import layers_as_one_view

    separate = [torch.zeros(4, 16, 2, 16, dtype=torch.float16) for _ in range(2)]
    assert layers_as_one_view(separate) is None, "layers in two allocations cannot be one strided view"
    pool = torch.zeros(3, 4, 16, 2, 16, dtype=torch.float16)
    assert layers_as_one_view([pool[0], pool[2], pool[1]]) is None, "unevenly spaced layers are refused"
    assert layers_as_one_view([pool[0], pool[1, :, :8]]) is None, "layers of different shapes are refused"
