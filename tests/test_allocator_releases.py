"""The reference's release switch (0.34's id map, 0.33's view of it) and the vLLM target's capability table."""

import dataclasses
import gc
import types
from dataclasses import dataclass

import pytest

from harness.targets.allocator.capabilities import CAPABILITIES, probe_capabilities
from harness.targets.allocator.target import make_reference_target
from reference_impl.kv_cache.block_pool import BlockHashToBlockMap, BlockPool
from reference_impl.kv_cache.kv_cache_utils import KVCacheBlock
from reference_impl import releases
from reference_impl.kv_cache.release import ENV_VAR, NEWEST, allocator_era, parse_release
from suites.allocator.helpers import new_step


@pytest.mark.parametrize("text,expected", [("0.33", "v0.33"), ("0.33.0", "v0.33"), ("v0.13", "seed"),
                                           ("0.15.2", "v0.14"), ("0.40.1", NEWEST)])
def test_release_spellings(text, expected):
    assert parse_release(text) == expected


@pytest.mark.parametrize("text", ["0.12", "033", "latest", "0.33.x", ""])
def test_release_bad_values_name_the_variable(text, monkeypatch):
    monkeypatch.setenv(ENV_VAR, text)
    if not text:  # empty: the default
        assert allocator_era() == NEWEST
        return
    with pytest.raises(ValueError, match=rf"^{ENV_VAR}: '{text}' is not a vLLM release .*accepted: X.Y or X.Y.Z"):
        allocator_era()


def test_release_refusal_names_the_accepted_range(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "0.12")
    with pytest.raises(ValueError) as info:
        allocator_era()
    newest = ".".join(map(str, releases.RELEASES[-1].key[:2]))  # the registry's newest row (0.34 today)
    assert str(info.value) == (f"{ENV_VAR}: '0.12' is not a vLLM release the reference follows (accepted: X.Y or X.Y.Z "
                               f"from 0.13; newer ones get {newest}'s behaviour)")


def test_id_map_holds_ids_and_keeps_shared_keys_apart(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    blocks = [KVCacheBlock(i) for i in range(5)]
    cache = BlockHashToBlockMap(blocks)
    cache.insert(b"a", blocks[1])
    cache.insert(b"a", blocks[3])
    cache.insert(b"b", blocks[2])
    assert cache._cache == {b"a": 1, b"b": 2}
    assert cache._dup_ids == {b"a": {1: None, 3: None}}
    assert not gc.is_tracked(cache._cache), "a dict of bytes and ints is never walked by the GC"
    assert cache.pop(b"a", 4) is None and cache.contain(b"a", 3)
    assert cache.pop(b"a", 1) is blocks[1]
    assert cache._cache == {b"a": 3, b"b": 2} and cache._dup_ids == {}, "one block left: no longer shared"
    assert cache.get_one_block(b"a") is blocks[3]


def test_033_view_reads_and_writes_blocks(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "0.33.0")
    pool = BlockPool(6, enable_caching=True, hash_block_size=4)
    b1, b3 = pool.blocks[1], pool.blocks[3]
    cache = pool.cached_block_hash_to_block
    cache.insert(b"k", b1)
    cache.insert(b"k", b3)
    assert cache._cache == {b"k": {1: b1, 3: b3}}
    cache.pop(b"k", 1)
    assert cache._cache == {b"k": {3: b3}}, "0.33: a shared key stays a dict down to one block"
    saved = dict(cache._cache)
    cache._cache.pop(b"k")
    assert cache.get_one_block(b"k") is None, "the view writes through"
    cache._cache[b"k"] = saved[b"k"]
    assert cache.get_one_block(b"k") is b3


def test_pool_is_freed_by_refcounting_alone():
    pool = BlockPool(8, enable_caching=True, hash_block_size=4)
    ref = __import__("weakref").ref(pool)
    gc.disable()
    try:
        del pool
        assert ref() is None, "blocks refer to their pool weakly: no cycle keeps it alive"
    finally:
        gc.enable()


@dataclass
class _Tensor:
    size: int
    shared_by: list


def _old_release_modules():
    """Modules shaped like vLLM 0.13's allocator API (hand-written from its source)."""
    @dataclass
    class KVCacheConfig:
        num_blocks: int
        kv_cache_tensors: list
        kv_cache_groups: list

    @dataclass
    class MambaSpec:
        block_size: int
        num_speculative_blocks: int = 0

    class KVCacheBlocks:
        def get_block_ids(self, allow_none=False):
            pass

    class KVCacheManager:
        def __init__(self, kv_cache_config, max_model_len, hash_block_size, enable_caching=True,
                     use_eagle=False, dcp_world_size=1):
            pass

        def get_computed_blocks(self, request) -> "tuple[KVCacheBlocks, int]":
            pass

        def allocate_slots(self, request, num_new_tokens, num_new_computed_tokens=0):
            pass

    class BlockPool:
        pass

    class FreeKVCacheBlockQueue:
        pass

    return {"iface": types.SimpleNamespace(KVCacheConfig=KVCacheConfig, MambaSpec=MambaSpec, KVCacheTensor=_Tensor),
            "pool": types.SimpleNamespace(BlockPool=BlockPool),
            "manager": types.SimpleNamespace(KVCacheManager=KVCacheManager, KVCacheBlocks=KVCacheBlocks),
            "utils": types.SimpleNamespace(FreeKVCacheBlockQueue=FreeKVCacheBlockQueue), "events": None}


def test_capability_table_of_an_old_release():
    have, lacks = probe_capabilities(_old_release_modules())
    # HiSparse's platform backend is only needed by releases that have one (0.34+): nothing to lack here
    assert have == {"dcp", "hisparse_backend"}
    expected_lacking = set(CAPABILITIES) - have
    assert set(lacks) == expected_lacking
    assert lacks["hash_lookahead"] == ("KVCacheManager takes no num_hash_lookahead_tokens (block hashes cover "
                                       "only their own block)")
    assert lacks["shared_prefix_boundary"].startswith("get_computed_blocks returns (blocks, hit tokens)")


@pytest.mark.parametrize("fields,has", [(("num_prefill_checkpoint_blocks",), False),
                                        (("num_prefill_checkpoint_blocks", "prefill_checkpoint_alignment"), True)],
                         ids=["blocks-only", "blocks-and-alignment"])
def test_mamba_checkpoints_need_the_checkpoint_alignment(fields, has):
    """vLLM 0.29.0's MambaSpec has num_prefill_checkpoint_blocks but no prefill_checkpoint_alignment (its
    checkpoint sits below a chunk ending off a block boundary, with no position rules): the section 4.5 checks,
    which configure an alignment, are N/A there; 0.30.0 adds the field."""
    modules = _old_release_modules()
    spec = dataclasses.make_dataclass("MambaSpec", [("block_size", int), ("num_speculative_blocks", int, 0),
                                                    *((name, int, 0) for name in fields)])
    modules["iface"] = types.SimpleNamespace(**{**vars(modules["iface"]), "MambaSpec": spec})
    have, lacks = probe_capabilities(modules)
    assert ("mamba_checkpoints" in have) is has
    if not has:
        assert "prefill_checkpoint_alignment" in lacks["mamba_checkpoints"]


def test_a_step_starts_only_where_the_release_has_new_step_starts():
    """vLLM 0.16.0 caches Mamba prefixes but its KVCacheManager has no new_step_starts (its scheduler calls
    nothing between steps): a chunked-prefill check there must not call it (it raised AttributeError on 0.16.0);
    where the release has it (probed, as the reference), the step starts."""
    _, lacks = probe_capabilities(_old_release_modules())
    assert "new_step_starts" in lacks
    new_step(types.SimpleNamespace(lacks=lacks), object())  # an object without the method: nothing is called

    calls = []

    class Manager:
        def new_step_starts(self):
            calls.append("step")

    new_step(make_reference_target(), Manager())
    assert calls == ["step"]


class _Block:
    def __init__(self, block_id):
        self.block_id = block_id


def _pool_modules(prepend_when):
    """A block pool shaped like vLLM's (BlockPool(num_gpu_blocks, enable_caching, hash_block_size),
    get_new_blocks, free_blocks), whose free_blocks puts freed blocks at the head of the free queue when
    `prepend_when(enable_caching)` holds and at the tail otherwise."""

    class BlockPool:
        def __init__(self, num_gpu_blocks, enable_caching, hash_block_size):
            self.enable_caching = enable_caching
            self.free = [_Block(i) for i in range(1, num_gpu_blocks)]  # block 0 is the null block

        def get_new_blocks(self, n):
            out, self.free = self.free[:n], self.free[n:]
            return out

        def free_blocks(self, blocks):
            if prepend_when(self.enable_caching):
                self.free = list(reversed(blocks)) + self.free
            else:
                self.free = self.free + list(blocks)

    return {"pool": types.SimpleNamespace(BlockPool=BlockPool)}


@pytest.mark.parametrize("shape,prepend_when,expected", [
    ("every freed block to the tail (0.13, 0.20; 0.23 unless the caller asks to prepend)", lambda caching: False, False),
    ("unhashed blocks first only while caching is on (0.27)", lambda caching: caching, False),
    ("freed blocks of an uncached pool first (0.24-0.26, 0.28+, the reference)", lambda caching: True, True),
])
def test_unhashed_lifo_is_probed_from_the_pool_behaviour(shape, prepend_when, expected):
    have, lacks = probe_capabilities(_pool_modules(prepend_when), {"unhashed_lifo": CAPABILITIES["unhashed_lifo"]})
    assert ("unhashed_lifo" in have) is expected, shape
    if not expected:
        assert lacks["unhashed_lifo"].startswith("freed blocks of a pool without prefix caching join the tail")



class _NoBudget:
    def __init__(self, kv_cache_config, max_model_len):
        pass


class _BatchBudget:
    def __init__(self, kv_cache_config, max_model_len, max_num_batched_tokens=None):
        pass


class _InFlightBudget:
    def __init__(self, kv_cache_config, max_model_len, max_in_flight_tokens=None):
        pass


@pytest.mark.parametrize("manager,expected", [
    (_NoBudget, False),  # 0.13 - 0.19: no budget bounds a sliding-window request
    (_BatchBudget, True),  # 0.20 - 0.24: max_num_batched_tokens
    (_InFlightBudget, True),  # 0.27+, the reference: max_in_flight_tokens
])
def test_the_token_budget_is_probed_under_either_name(manager, expected):
    modules = {"manager": types.SimpleNamespace(KVCacheManager=manager)}
    have, _ = probe_capabilities(modules, {"max_in_flight_tokens": CAPABILITIES["max_in_flight_tokens"]})
    assert ("max_in_flight_tokens" in have) is expected, manager.__name__


def test_a_shape_named_in_code_is_probed_by_that_name_not_by_its_era():
    """reference_impl/kv_cache/release.py's shapes that say where vLLM's code shows them are capabilities of the
    table, probed by that name: a coordinator with `reserved_import_pages` has the import reservation of 0.34
    whatever the release's number, one without it lacks it, and the reference (the newest era) has it."""
    from harness.targets.allocator.target import REFERENCE_MODULES
    from harness.targets.allocator.capabilities import ReleaseModules
    from reference_impl.kv_cache.release import RESERVES_IMPORT_PAGES, SHAPES

    named = {shape.capability: shape for shape in SHAPES if shape.capability}
    assert named["hisparse_import_reservation"] is RESERVES_IMPORT_PAGES
    assert set(named) <= set(CAPABILITIES)  # every one a row of the table
    capability = {"hisparse_import_reservation": CAPABILITIES["hisparse_import_reservation"]}

    class Reserving:
        reserved_import_pages = 0

    class Admitting:
        pass

    for coordinator, expected in ((Reserving, True), (Admitting, False), (None, False)):
        module = None if coordinator is None else types.SimpleNamespace(HiSparseCoordinator=coordinator)
        have, lacks = probe_capabilities({"hisparse_coordinator": module}, capability)
        assert ("hisparse_import_reservation" in have) is expected
        assert lacks == ({} if expected else {"hisparse_import_reservation": RESERVES_IMPORT_PAGES.lacks})
    have, _ = probe_capabilities(ReleaseModules(REFERENCE_MODULES), capability)
    assert have == {"hisparse_import_reservation"}


def test_a_shape_states_its_capability_name_and_lack_together():
    from reference_impl.kv_cache.release import Shape

    with pytest.raises(ValueError, match="capability, seen_at and lacks go together"):
        Shape("v0.35", capability="x", seen_at=None, lacks="y")
