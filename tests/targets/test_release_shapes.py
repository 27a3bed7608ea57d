"""API shapes of vLLM 0.23-0.32 that the targets meet, on small fakes of those shapes (no vLLM needed): the
allocator capability probes added for them, the connector adapter's block mirrors and preset model config, and
the config target's Triton stand-in for HiSparse on CUDA."""

from __future__ import annotations

import sys
import types

import pytest

from harness.targets.allocator.capabilities import CAPABILITIES, probe_capabilities
from harness.targets.connector.vllm_adapter import PresetModelConfig, VllmConnectorAdapter
from tests.targets.fake_vllm import write_fake_vllm


def _probe(name: str, mods: dict) -> bool:
    have, _ = probe_capabilities(mods, {name: CAPABILITIES[name]})
    return name in have


def _coordinator_module(source: str) -> types.ModuleType:
    """A module whose HybridKVCacheCoordinator has `source` as its body (the probes read the class's source)."""
    module = types.ModuleType("fake_coordinator")
    namespace: dict = {}
    exec(compile(f"class HybridKVCacheCoordinator:\n{source}", "<fake>", "exec"), namespace)  # noqa: S102
    module.HybridKVCacheCoordinator = namespace["HybridKVCacheCoordinator"]
    return module


def test_hybrid_dcp_is_lacking_where_the_coordinator_refuses_dcp(monkeypatch):
    # getsource needs a file: read the class body from the text given instead
    import inspect

    texts = {}
    monkeypatch.setattr(inspect, "getsource", lambda obj: texts[obj])
    refusing = _coordinator_module("    pass\n").HybridKVCacheCoordinator
    texts[refusing] = '        assert dcp_world_size == 1, "DCP not support hybrid attn now."\n'
    accepting = _coordinator_module("    pass\n").HybridKVCacheCoordinator
    texts[accepting] = "        self.dcp_world_size = dcp_world_size\n"
    assert not _probe("hybrid_dcp", {"coordinator": types.SimpleNamespace(HybridKVCacheCoordinator=refusing)})
    assert _probe("hybrid_dcp", {"coordinator": types.SimpleNamespace(HybridKVCacheCoordinator=accepting)})


def test_partial_prefix_hits_need_the_coordinator_and_the_copies_not_only_the_pool(monkeypatch):
    import inspect

    class Pool:
        def cache_partial_block(self):
            pass

    class OldManager:  # 0.24, 0.25: the pool primitive only
        pass

    class Manager:
        def take_kv_cache_block_copies(self):
            pass

    coordinator = _coordinator_module("    pass\n").HybridKVCacheCoordinator
    monkeypatch.setattr(inspect, "getsource", lambda obj: "self.enable_partial_hash_hits = False")

    def mods(manager):
        return {"pool": types.SimpleNamespace(BlockPool=Pool), "manager": types.SimpleNamespace(KVCacheManager=manager),
                "coordinator": types.SimpleNamespace(HybridKVCacheCoordinator=coordinator)}

    assert not _probe("partial_prefix_hits", mods(OldManager))
    assert _probe("partial_prefix_hits", mods(Manager))


def test_tagged_extra_keys_are_read_from_the_hashing_module(monkeypatch):
    import inspect

    untagged, tagged = types.ModuleType("untagged"), types.ModuleType("tagged")
    sources = {untagged: "cache_salt_keys = [request.cache_salt]\n",
               tagged: 'cache_salt_keys = [("cache_salt", request.cache_salt)]\n'}
    monkeypatch.setattr(inspect, "getsource", lambda obj: sources[obj])
    assert not _probe("tagged_extra_keys", {"utils": untagged})
    assert _probe("tagged_extra_keys", {"utils": tagged})


class _ReadOnlyHashBlock:
    """vLLM 0.24-0.29's KVCacheBlock: `block_hash` is a property, set with the tokens the hash covers."""

    def __init__(self, block_id, is_null=False):
        self.block_id, self.is_null, self._hash, self._tokens = block_id, is_null, None, None

    @property
    def block_hash(self):
        return self._hash

    def set_block_hash(self, block_hash, num_tokens=None):
        self._hash, self._tokens = block_hash, num_tokens


class _PlainBlock:
    """vLLM 0.20's KVCacheBlock: a plain `block_hash` attribute."""

    def __init__(self, block_id, is_null=False):
        self.block_id, self.is_null, self.block_hash = block_id, is_null, None


class _Pool:
    def release_hash(self, key):
        return b"release:" + key


@pytest.mark.parametrize("block_class", [_ReadOnlyHashBlock, _PlainBlock])
def test_block_mirror_carries_the_release_hash_in_either_form(block_class):
    v = types.SimpleNamespace(utils=types.SimpleNamespace(KVCacheBlock=block_class))
    engine_block = types.SimpleNamespace(block_id=3, block_hash=b"k", block_hash_num_tokens=48)
    mirror = VllmConnectorAdapter._block(v, engine_block, _Pool())
    assert mirror.block_hash == b"release:k"
    if block_class is _ReadOnlyHashBlock:
        assert mirror._tokens == 48, "the tokens the engine block's hash covers"


def test_preset_model_config_answers_what_older_schedulers_read():
    from reference_impl.engine.core import EngineConfig
    from reference_impl.kv_cache import kv_cache_interface as kspecs

    spec = kspecs.FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype=__import__("torch").float16)
    config = kspecs.KVCacheConfig(num_blocks=4, kv_cache_tensors=[],
                                  kv_cache_groups=[kspecs.KVCacheGroupSpec(["l0"], spec)])
    model = PresetModelConfig(EngineConfig(), config)
    assert model.is_diffusion is False and model.runner_type == "generate" and model.is_moe is False


def test_hisparse_on_cuda_has_triton_only_while_the_case_runs(tmp_path, monkeypatch):
    write_fake_vllm(tmp_path, "0.30.0", {
        "vllm.platforms": "class CpuPlatform:\n    pass\ncurrent_platform = CpuPlatform()\n",
        "vllm.config.vllm": "HAS_TRITON = False\n",
    })
    def vllm_modules():
        return [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]

    for name in vllm_modules():
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    from harness.targets.config.vllm_target import patched_platform

    try:
        import vllm.config.vllm as config_module

        with patched_platform(True, True):
            assert config_module.HAS_TRITON is True, "a CUDA machine has Triton"
        assert config_module.HAS_TRITON is False
        with patched_platform(True, None):  # not a HiSparse case: the machine's own answer
            assert config_module.HAS_TRITON is False
    finally:
        for name in vllm_modules():  # the fake must not outlive the test (later tests importorskip vllm)
            del sys.modules[name]


@pytest.mark.parametrize("joined,expected", [(True, False), (False, True)])
def test_coarse_hash_is_probed_from_the_release_hash_list(joined, expected):
    class BlockHashListWithBlockSize:  # 0.20 / 0.23 join a coarse block's fine hashes; 0.24+ take the last
        def __init__(self, block_hashes, hash_block_size, target_block_size):
            self.hashes, self.scale = block_hashes, target_block_size // hash_block_size

        def __getitem__(self, i):
            fine = self.hashes[i * self.scale:(i + 1) * self.scale]
            return b"".join(fine) if joined else fine[-1]

    assert _probe("coarse_hash_last_fine",
                  {"utils": types.SimpleNamespace(BlockHashListWithBlockSize=BlockHashListWithBlockSize)}) is expected


# ---- the registered KV layout of releases without standardized views ----------------------------------------
def _backend_module(shape_fn) -> types.SimpleNamespace:
    """A flash_attn module whose FlashAttentionBackend declares `shape_fn(num_blocks, block_size, heads, head)`."""
    class FlashAttentionBackend:
        @staticmethod
        def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
            return shape_fn(num_blocks, block_size, num_kv_heads, head_size)

    return types.SimpleNamespace(FlashAttentionBackend=FlashAttentionBackend)


@pytest.mark.parametrize("shape_fn,outermost,packed", [
    (lambda b, n, h, d: (2, b, n, h, d), False, False),     # 0.13-0.22's flash_attn.py
    (lambda b, n, h, d: (b, 2, n, h, d), True, False),      # 0.24's
    (lambda b, n, h, d: (b, h, n, 2 * d), True, True),      # 0.27's, 0.28's
])
def test_layout_forms_are_probed_from_flash_attention_shape(shape_fn, outermost, packed):
    from harness.targets.connector.capabilities import FORMS

    def probe(name):
        have, _ = probe_capabilities({"flash_attn": _backend_module(shape_fn)}, {name: FORMS[name]})
        return name in have

    assert probe("kv_blocks_outermost") is outermost and probe("kv_packed_content") is packed


def test_mamba_page_view_is_read_from_the_model_runner(monkeypatch):
    import inspect

    from harness.targets.connector.capabilities import FORMS

    class GPUModelRunner:
        pass

    texts = {"pages": "kv_caches[layer_name] = raw_tensor[: n].view(\n    num_blocks, 1, 1, page_size_bytes\n)\n",
             "lists": "kv_caches[layer_name] = state_tensors\n"}
    for text, expected in (("pages", True), ("lists", False)):
        monkeypatch.setattr(inspect, "getsource", lambda obj, t=texts[text]: t)
        have, _ = probe_capabilities({"model_runner": types.SimpleNamespace(GPUModelRunner=GPUModelRunner)},
                                     {"mamba_page_view": FORMS["mamba_page_view"]})
        assert ("mamba_page_view" in have) is expected, text


def _engine_layer(blocks=4, tokens=16, heads=2, head=3):
    """One attention layer of kvconform's memory `[B, N, H, 2*D]` (K the first D of the content, V the last),
    every element its own flat index."""
    import torch

    return torch.arange(blocks * tokens * heads * 2 * head, dtype=torch.float32).view(blocks, tokens, heads, 2 * head)


@pytest.mark.parametrize("outermost", [False, True])
def test_split_kv_layouts_are_flash_attention_axes_mirrored_and_synced(outermost):
    from harness.targets.connector.vllm_adapter import BlocksOutermostLayout, SplitKVLayout

    t = _engine_layer()
    registered, pairs = (BlocksOutermostLayout() if outermost else SplitKVLayout()).register({"l": t})
    layer = registered["l"]
    # FlashAttention's index: [kv, block, token, head, d] (0.13-0.22) or [block, kv, token, head, d] (0.24)
    def at(kv, b, n, h, d):
        return layer[b, kv, n, h, d] if outermost else layer[kv, b, n, h, d]

    assert tuple(layer.shape) == ((4, 2, 16, 2, 3) if outermost else (2, 4, 16, 2, 3)) and layer.is_contiguous()
    assert at(0, 2, 5, 1, 2) == t[2, 5, 1, 2] and at(1, 2, 5, 1, 2) == t[2, 5, 1, 3 + 2], "K then V of the content"
    assert layer.data_ptr() != t.data_ptr(), "a mirror: these axes cannot alias the engine's memory"
    (engine_view, mirror), = pairs
    layer.zero_()
    at(1, 3, 0, 0, 0).fill_(-1.0)
    engine_view.copy_(mirror)  # the adapter's copy back after a worker hook
    assert t[3, 0, 0, 3] == -1.0 and t[3, 0, 0, 0] == 0.0


def test_packed_layout_is_the_standardized_order_in_storage_of_its_own_and_mamba_pages_are_int8_views():
    import torch

    from harness.targets.connector.vllm_adapter import BlocksOutermostLayout

    pool = torch.arange(2 * 4 * 16 * 2 * 6, dtype=torch.float32).view(4, 2, 16, 2, 6)   # blocks, layers, N, H, 2D
    t = pool[:, 1]   # the second layer of a pool kvconform's layers share
    # one Mamba layer's two states packed from byte 0 of each block's 40-byte page, as the engine hands them
    raw = torch.zeros(4 * 40, dtype=torch.int8)
    states = [torch.as_strided(raw.view(torch.float32), (4, 2, 3), (10, 3, 1), 0),
              torch.as_strided(raw.view(torch.float16), (4, 5), (20, 1), 12)]
    registered, pairs = BlocksOutermostLayout(packed=True, mamba_pages=True).register(
        {"attn": t, "mamba": states})
    layer = registered["attn"]
    assert tuple(layer.shape) == (4, 2, 16, 6) and layer[2, 1, 5, 4] == t[2, 5, 1, 4], "(B, H, N, 2*D)"
    assert layer.untyped_storage().nbytes() == 4 * 16 * 2 * 6 * 4, "the layer's own storage: its blocks only"
    assert layer.permute(0, 2, 1, 3).is_contiguous(), "(B, N, H, 2*D) memory, as the release lays it out"
    (engine_view, mirror), = pairs
    layer[3, 0, 0, 0] = -1.0
    engine_view.copy_(mirror)  # the adapter's copy back after a worker hook
    assert pool[3, 1, 0, 0, 0] == -1.0 and pool[3, 0, 0, 0, 0] != -1.0
    pages = registered["mamba"]
    # 0.27.0/0.28.0 gpu_model_runner.py (`view(num_blocks, 1, 1, page_size_bytes)`): the whole 40-byte page, not the
    # 34 state bytes (0.28.0's OffloadingConnector views it as (num_blocks, page) and failed on the state bytes)
    assert pages.dtype == torch.int8 and tuple(pages.shape) == (4, 1, 1, 40), "[B, 1, 1, page bytes]"
    assert pages.view(4, 40).data_ptr() == raw.data_ptr(), "the engine's pages, no copy"
    pages[2].fill_(1)
    assert (states[0][2] != 0).all() and (states[1][2] != 0).all() and (states[0][1] == 0).all()
    lists, _ = BlocksOutermostLayout().register({"mamba": states})
    assert lists["mamba"][0] is states[0], "without page views a Mamba layer is its list of state tensors"


@pytest.mark.parametrize("salt_source,expected", [
    ("cache_salt_keys = [request.cache_salt]\n", True),                      # 0.13-0.30: untagged
    ('cache_salt_keys = [("cache_salt", request.cache_salt)]\n', False),     # 0.31+: as kvconform's engine
])
def test_release_block_hashing_is_read_from_the_release_hash_module(monkeypatch, salt_source, expected):
    import inspect

    from harness.targets.connector.capabilities import FORMS

    class BlockHashListWithBlockSize:  # 0.24+: a coarser block is its last fine hash
        def __init__(self, block_hashes, hash_block_size, target_block_size):
            self.hashes = block_hashes

        def __getitem__(self, i):
            return self.hashes[-1]

    utils = types.ModuleType("utils")
    utils.BlockHashListWithBlockSize = BlockHashListWithBlockSize
    monkeypatch.setattr(inspect, "getsource", lambda obj: salt_source)
    have, _ = probe_capabilities({"kv_utils": utils}, {"release_block_hashing": FORMS["release_block_hashing"]})
    assert ("release_block_hashing" in have) is expected


def test_manager_view_hands_the_release_hashed_pool_where_given():
    from harness.targets.connector.vllm_adapter import _ManagerView

    manager = types.SimpleNamespace(block_pool="engine pool", num_gpu_blocks=7)
    assert _ManagerView(manager).block_pool == "engine pool"
    view = _ManagerView(manager, "release-hashed pool")
    assert view.block_pool == "release-hashed pool" and view.num_gpu_blocks == 7
