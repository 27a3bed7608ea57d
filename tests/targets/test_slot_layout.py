"""The connector adapter's memory on releases whose KVCacheTensor has no `layers` (vLLM 0.13-0.28): one buffer per
layer slot shared by the layers of every group at that slot, as those releases allocate it and as vLLM 0.21's
offloading worker asserts (one `data_ptr` per KVCacheTensor, its storage from byte 0), and a Mamba 'align' preset
N/A where the release never builds it. The layout tests need no vLLM; the last test runs vLLM 0.21.0's
OffloadingConnector through the adapter where that release's venv is installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import torch

from harness.targets.connector.vllm_adapter import SplitKVLayout, layer_slots
from reference_impl.engine.presets import get_preset
from reference_impl.kv_cache.kv_cache_interface import AttentionSpec
from reference_impl.kv_cache.tensors import KVCacheTensors
from tests.vllm_venvs import release_python

REPO = Path(__file__).resolve().parents[2]
NUM_BLOCKS = 12


def _engine(preset: str):
    config = get_preset(preset).kv_cache_config(NUM_BLOCKS)
    memory = KVCacheTensors(config, device="cpu")
    # Bytes varied enough that a permuted or shifted copy shows, and below 64 so every float16/32 is finite
    # (torch.equal is False on NaN).
    memory.backing.copy_(torch.arange(memory.backing.numel(), dtype=torch.int64).remainder(61).to(torch.uint8))
    return config, memory


def test_slots_are_the_layers_of_each_group_at_one_offset():
    config, _ = _engine("fa+swa+mamba")
    assert layer_slots(config) == [["model.layers.0.full", "model.layers.2.swa", "model.layers.4.mamba"],
                                   ["model.layers.1.full", "model.layers.3.swa", "model.layers.5.mamba"]]


@pytest.mark.parametrize("preset", ["fa+swa", "fa16+swa32", "fa+mamba_align", "fa+swa+mamba"])
def test_layers_of_a_slot_share_one_buffer_from_byte_zero(preset):
    config, memory = _engine(preset)
    registered, pairs = SplitKVLayout(layer_slots(config)).register(memory.kv_caches())
    page = config.kv_cache_tensors[0].block_stride
    for slot in layer_slots(config):
        firsts = [registered[n][0] if isinstance(registered[n], list) else registered[n] for n in slot]
        assert len({t.untyped_storage().data_ptr() for t in firsts}) == 1, slot
        assert all(t.untyped_storage().nbytes() == NUM_BLOCKS * page for t in firsts), slot
    assert len(pairs) == len(layer_slots(config)), "one copy per slot keeps it in sync"


@pytest.mark.parametrize("preset", ["fa+swa", "fa16+swa32", "fa+swa+mamba"])
def test_each_layer_reads_its_own_k_and_v_planes(preset):
    config, memory = _engine(preset)
    engine = memory.kv_caches()
    registered, pairs = SplitKVLayout(layer_slots(config)).register(engine)
    for engine_view, mirror in pairs:
        mirror.copy_(engine_view)
    for name, spec in config.layer_specs.items():
        if not isinstance(spec, AttentionSpec):
            for state, engine_state in zip(registered[name], engine[name]):
                assert torch.equal(state, engine_state), name
            continue
        head = spec.head_size
        # The oracle: kvconform's token-major rows hold K in the first head_size values, V in the rest.
        assert torch.equal(registered[name][0], engine[name][..., :head]), name
        assert torch.equal(registered[name][1], engine[name][..., head:]), name


def test_writes_of_two_groups_to_one_slot_both_reach_the_engine():
    config, memory = _engine("fa+swa+mamba")
    engine = memory.kv_caches()
    registered, pairs = SplitKVLayout(layer_slots(config)).register(engine)
    for engine_view, mirror in pairs:
        mirror.copy_(engine_view)
    # Block 3 belongs to full attention, block 5 to the Mamba group: a load into each, then the copy back.
    registered["model.layers.0.full"][1, 3] = 7.0
    registered["model.layers.4.mamba"][0][5] = -2.0
    before_swa = engine["model.layers.2.swa"][8].clone()
    for engine_view, mirror in reversed(pairs):
        engine_view.copy_(mirror)
    head = config.layer_specs["model.layers.0.full"].head_size
    assert bool((engine["model.layers.0.full"][3][..., head:] == 7.0).all())
    assert bool((engine["model.layers.4.mamba"][0][5] == -2.0).all())
    assert torch.equal(engine["model.layers.2.swa"][8], before_swa), "a block no one wrote is left as it was"


def test_layers_of_one_slot_with_other_head_sizes_are_refused_in_one_line():
    config, memory = _engine("fa+swa")
    engine = memory.kv_caches()
    narrow = engine["model.layers.2.swa"]
    engine["model.layers.2.swa"] = narrow.reshape(*narrow.shape[:-2], narrow.shape[-2] * 2, narrow.shape[-1] // 2)
    with pytest.raises(ValueError, match=r"^layer 'model.layers.2.swa': the attention layers of one memory slot must "
                                         r"share dtype and head size"):
        SplitKVLayout(layer_slots(config)).register(engine)


def _run_on(release: str, *args: str) -> subprocess.CompletedProcess:
    python = release_python(release)
    return subprocess.run([str(python), "-m", "pytest", "suites/connector", "-q", "-p", "no:cacheprovider",
                           "-W", "ignore::DeprecationWarning", *args], cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True, timeout=600)


def test_vllm_021_offloading_connector_stores_and_loads_through_the_adapter():
    # Before: register_kv_caches raised KeyError: 'model.layers.0.full' (no layers in the static forward
    # context), then the slot asserts, then the local hit of unhashed blocks.
    done = _run_on("0.21.0", "--kv-connector=vllm:OffloadingConnector", "-k", "C14 or C19")
    assert done.returncode == 0, done.stdout[-3000:]
    assert " passed" in done.stdout and "failed" not in done.stdout.splitlines()[-1]


def test_vllm_021_mamba_align_preset_is_na_with_the_release_reason():
    done = _run_on("0.21.0", "--kv-connector=vllm:OffloadingConnector", "-k", "C14 and fa+mamba_align", "-rs")
    assert done.returncode == 0, done.stdout[-3000:]
    assert "N/A on 0.21.0: an 'align' Mamba group's block is the cache block size" in done.stdout
