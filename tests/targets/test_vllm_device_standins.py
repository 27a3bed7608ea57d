"""The CPU stand-ins for the CUDA pieces of vLLM's offloading connectors (harness.targets.connector.vllm_device_standins).

The copy kernels are checked against torch's own slice copies (an independent oracle); the stream and event
stand-ins against the semantics vLLM relies on. Installing them needs vLLM (skipped without it).
"""

from __future__ import annotations

import importlib
import inspect
import os
import random

import numpy as np
import pytest
import torch

from harness.targets.connector import vllm_device_standins as standins
from tests.vllm_venvs import needs_vllm


def _pages(seed: int, rows: int, width: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-128, 128, (rows, width), dtype=torch.int8, generator=g)


def _copies(seed: int, src_rows: int, dst_rows: int, width: int, count: int):
    """`count` (src row, dst row, byte offset, size) copies, no two writing the same destination bytes."""
    rng = random.Random(seed)
    dst_rows_used = rng.sample(range(dst_rows), count)
    out = []
    for dst_row in dst_rows_used:
        offset = rng.randrange(width)
        out.append((rng.randrange(src_rows), dst_row, offset, rng.randrange(width - offset + 1)))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_swap_blocks_batch_copies_what_slices_copy(seed):
    src, dst = _pages(seed, 12, 96), _pages(seed + 100, 10, 96)
    expected = dst.clone()
    copies = _copies(seed, 12, 10, 96, 7)
    for s, d, off, size in copies:
        expected[d, off:off + size] = src[s, off:off + size]
    src_ptrs = torch.tensor([src[s].data_ptr() + off for s, _, off, _ in copies], dtype=torch.int64)
    dst_ptrs = torch.tensor([dst[d].data_ptr() + off for _, d, off, _ in copies], dtype=torch.int64)
    sizes = torch.tensor([size for *_, size in copies], dtype=torch.int64)
    standins.swap_blocks_batch(src_ptrs, dst_ptrs, sizes, is_src_access_order_any=True)
    assert torch.equal(dst, expected)


@pytest.mark.parametrize("seed", range(4))
def test_batch_memcpy_reads_its_address_arrays_like_cuMemcpyBatchAsync(seed):
    src, dst = _pages(seed, 8, 64), _pages(seed + 50, 8, 64)
    expected = dst.clone()
    copies = _copies(seed, 8, 8, 64, 5)
    for s, d, off, size in copies:
        expected[d, off:off + size] = src[s, off:off + size]
    dsts = np.array([dst[d].data_ptr() + off for _, d, off, _ in copies], dtype=np.uint64)
    srcs = np.array([src[s].data_ptr() + off for s, _, off, _ in copies], dtype=np.uint64)
    sizes = np.array([size for *_, size in copies], dtype=np.uint64)
    status = standins.batch_memcpy(dsts.ctypes.data, srcs.ctypes.data, sizes.ctypes.data, len(copies),
                                   None, None, 1, None, 0)
    assert status == 0
    assert torch.equal(dst, expected)


def test_events_are_complete_once_recorded_and_time_wall_clock():
    start, end = standins.StandInEvent(enable_timing=True), standins.StandInEvent(enable_timing=True)
    stream = standins.StandInStream(priority=0)
    start.record(stream)
    end.record(stream)
    assert start.query() and end.query()
    assert start.elapsed_time(end) >= 0.0
    assert standins.StandInStream.priority_range() == (0, 0)
    assert stream.record_event().query()


def test_device_memory_is_the_same_bytes_seen_as_device_memory():
    backing = torch.arange(64, dtype=torch.int8)
    device = backing.as_subclass(standins.DeviceMemory)
    view = device.view(torch.int8).view(4, 16)
    assert view.is_cuda and isinstance(view, standins.DeviceMemory)
    assert view.data_ptr() == backing.data_ptr()
    assert not backing.is_cuda, "only the stand-in answers as device memory"


def test_install_rebinds_only_the_listed_vllm_modules():
    pytest.importorskip("vllm.v1.kv_offload.cpu.gpu_worker", reason=needs_vllm("vLLM's CPU offload worker"))
    from vllm.platforms import current_platform

    try:
        done = standins.install()
        gpu_worker = importlib.import_module("vllm.v1.kv_offload.cpu.gpu_worker")
        spec = importlib.import_module("vllm.v1.kv_offload.cpu.spec")
        assert "vllm.v1.kv_offload.cpu.gpu_worker.ops" in done
        assert spec.current_platform.is_cuda_alike() and spec.current_platform.is_rocm()
        assert gpu_worker.PIN_MEMORY is False
        assert gpu_worker.torch.Event is standins.StandInEvent
        assert gpu_worker.torch.zeros is torch.zeros, "everything else is torch itself"
        assert not current_platform.is_cuda_alike(), "vLLM's platform elsewhere is untouched"
        assert standins.install() == done, "idempotent"
    finally:
        standins.uninstall()
    assert gpu_worker.torch is torch and spec.current_platform is current_platform


def test_a_release_without_the_patched_worker_modules_is_not_covered(monkeypatch):
    """vLLM 0.13.0's offloading worker lives in other modules than 0.33's: the stand-ins would patch nothing and
    the worker would reach CUDA, so the connector is reported as not runnable here instead of failing every check."""
    monkeypatch.setitem(standins._CONNECTOR_SITES, "SomeOffloader", ("json", "kvconform_absent_pkg.worker"))
    assert standins.uncovered_modules("SomeOffloader") == ["kvconform_absent_pkg.worker"]
    assert standins.uncovered_modules("ConnectorWithoutStandIns") == []


def test_an_uncovered_release_is_one_cannot_run_line(monkeypatch):
    from harness.targets.connector import vllm_facts as facts

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(standins._CONNECTOR_SITES, "OffloadingConnector", ("kvconform_absent_pkg.cpu_worker",))
    reason = facts.missing_requirement("OffloadingConnector")
    assert reason is not None and reason.startswith("cannot run here: OffloadingConnector needs CUDA"), reason
    assert "kvconform_absent_pkg.cpu_worker" in reason, f"the reason should name the missing module: {reason}"
    monkeypatch.setitem(standins._CONNECTOR_SITES, "OffloadingConnector", ("json",))
    assert facts.missing_requirement("OffloadingConnector") is None, "covered: it runs on the stand-ins"


def _fake_module(monkeypatch, name: str, **names):
    import sys
    import types

    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)  # what find_spec answers for an imported module
    for key, value in names.items():
        setattr(module, key, value)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def test_each_release_is_patched_under_the_name_its_module_binds(monkeypatch):
    """vLLM 0.20's SimpleCPUOffloadConnector worker asks `is_pin_memory_available()` and resolves its copy entry
    point into `_batch_memcpy_fn`, where 0.33's reads `PIN_MEMORY` and `_batch_memcpy`: each module gets the
    stand-in under the name it binds, and no name it lacks is added."""
    real_pin = lambda: True  # noqa: E731 - vLLM's answer on its unspecified platform
    worker = _fake_module(monkeypatch, "kvconform_fake_v020.worker", torch=torch, is_pin_memory_available=real_pin)
    ops = _fake_module(monkeypatch, "kvconform_fake_v020.cuda_mem_ops", _batch_memcpy_fn=None)
    monkeypatch.setattr(standins, "_SITES", {
        "kvconform_fake_v020.worker": ("torch", "PIN_MEMORY", "is_pin_memory_available"),
        "kvconform_fake_v020.cuda_mem_ops": ("_batch_memcpy", "_batch_memcpy_fn")})
    try:
        done = standins.install()
        assert sorted(done) == ["kvconform_fake_v020.cuda_mem_ops._batch_memcpy_fn",
                                "kvconform_fake_v020.worker.is_pin_memory_available",
                                "kvconform_fake_v020.worker.torch"]
        assert worker.is_pin_memory_available() is False
        assert worker.torch.cuda.Stream is standins.StandInStream
        assert ops._batch_memcpy_fn is standins.batch_memcpy
        assert not hasattr(worker, "PIN_MEMORY") and not hasattr(ops, "_batch_memcpy")
    finally:
        standins.uninstall()
    assert worker.is_pin_memory_available is real_pin and ops._batch_memcpy_fn is None and worker.torch is torch


def test_a_module_binding_none_of_a_pieces_names_is_not_covered(monkeypatch):
    """A release whose worker module names its pinned-memory switch in a way the stand-ins do not know still
    reaches CUDA: that module is reported, naming the names looked for."""
    _fake_module(monkeypatch, "kvconform_fake_other.worker", torch=torch, pin_memory_enabled=True)
    _fake_module(monkeypatch, "kvconform_fake_v020.worker2", torch=torch, is_pin_memory_available=lambda: True)
    monkeypatch.setitem(standins._CONNECTOR_SITES, "SomeOffloader", ("kvconform_fake_other.worker",
                                                                      "kvconform_fake_v020.worker2"))
    monkeypatch.setattr(standins, "_ONE_OF", {
        "kvconform_fake_other.worker": (("PIN_MEMORY", "is_pin_memory_available"),),
        "kvconform_fake_v020.worker2": (("PIN_MEMORY", "is_pin_memory_available"),)})
    assert standins.uncovered_modules("SomeOffloader") == [
        "kvconform_fake_other.worker (binds none of PIN_MEMORY, is_pin_memory_available)"]


def test_each_worker_call_runs_on_its_own_device():
    """Two TP ranks share this process: each worker's calls see its own device index (vLLM 0.27-0.31 pick the
    worker's slot of the shared region by it), and a call outside any worker's is refused, not given slot 0."""
    with standins.selected_device(1):
        assert standins.current_device_index() == 1
        with standins.selected_device(0):
            assert standins.current_device_index() == 0
        assert standins.current_device_index() == 1, "the outer worker's device again once the inner call returns"
    with pytest.raises(RuntimeError, match="no stand-in device selected"):
        standins.current_device_index()


_SLOT_BY_DEVICE = '''
def create_worker(world_size):
    return torch.accelerator.current_device_index() % world_size
'''
_SLOT_BY_RANK = '''
def create_worker(rank):
    return rank
'''


def test_the_device_index_is_patched_only_where_the_release_reads_it(monkeypatch):
    """vLLM 0.27's CPU spec picks the slot by `torch.accelerator.current_device_index()`, 0.33's by the logical rank:
    the spec module's `torch` is rebound only where its code reads the device index (read from the code)."""
    modules = {}
    for name, source in (("kvconform_fake_v027.spec", _SLOT_BY_DEVICE), ("kvconform_fake_v033.spec", _SLOT_BY_RANK)):
        module = _fake_module(monkeypatch, name, torch=torch)
        exec(compile(source, name, "exec"), vars(module))
        modules[name] = module
    monkeypatch.setattr(standins, "_SITES", {name: ("torch",) for name in modules})
    monkeypatch.setattr(standins, "_CODE_PATHS", {(name, "torch"): "current_device_index" for name in modules})
    try:
        assert standins.install() == ["kvconform_fake_v027.spec.torch"]
        with standins.selected_device(1):
            assert modules["kvconform_fake_v027.spec"].create_worker(2) == 1, "rank 1's slot, not device 0's"
        assert modules["kvconform_fake_v033.spec"].torch is torch
    finally:
        standins.uninstall()
    assert modules["kvconform_fake_v027.spec"].torch is torch


class _FileRegion:
    """A stand-in for vLLM's SharedOffloadRegion with its constructor's keywords: one file per engine, unlinked
    by `cleanup` (what its creator's shutdown does)."""

    def __init__(self, engine_id: str, num_blocks: int, rank: int | None, kv_bytes_per_block: int, cpu_page_size: int,
                 directory=None):
        self.mmap_path = str(directory / f"vllm_offload_{engine_id}.mmap")
        with open(self.mmap_path, "wb") as f:
            f.truncate(num_blocks * kv_bytes_per_block)

    def cleanup(self) -> None:
        os.unlink(self.mmap_path)


def test_shared_region_files_go_with_their_engine(tmp_path):
    """A region whose connector shut down cleanly removed its own file; one of an engine that never shut down is
    removed with its engine (another engine's stays until its own turn, or the process's exit)."""
    region_cls = standins.recording_region(_FileRegion)
    clean = region_cls("e-clean", 2, 0, 4096, 4096, directory=tmp_path)
    region_cls("e-left", 2, 0, 4096, 4096, directory=tmp_path)
    region_cls(engine_id="e-other", num_blocks=2, rank=1, kv_bytes_per_block=4096, cpu_page_size=2048,
               directory=tmp_path)
    clean.cleanup()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vllm_offload_e-left.mmap", "vllm_offload_e-other.mmap"]
    assert standins.remove_regions("e-clean") == [], "nothing left of a region that cleaned up"
    assert standins.remove_regions("e-left") == [str(tmp_path / "vllm_offload_e-left.mmap")]
    assert [p.name for p in tmp_path.iterdir()] == ["vllm_offload_e-other.mmap"]
    assert standins.remove_regions() == [str(tmp_path / "vllm_offload_e-other.mmap")]
    assert list(tmp_path.iterdir()) == []


def test_vllms_shared_region_leaves_no_file_behind():
    """vLLM's own SharedOffloadRegion (0.27-0.31 put the CPU tier there on a CUDA-alike platform), rebound by
    install(): a region nobody cleaned up is gone from /dev/shm once its engine's regions are removed."""
    spec = pytest.importorskip("vllm.v1.kv_offload.cpu.spec", reason=needs_vllm("vLLM's CPU offload spec"))
    if not hasattr(spec, "SharedOffloadRegion"):
        pytest.skip("this vLLM release has no shared offload region")
    engine_id = f"kvconform-test-{os.getpid()}"
    try:
        assert "vllm.v1.kv_offload.cpu.spec.SharedOffloadRegion" in standins.install()
        region_cls = spec.SharedOffloadRegion
        page = region_cls.BLOCK_SIZE_ALIGNMENT
        kwargs = {name: value for name, value in (("engine_id", engine_id), ("num_blocks", 2), ("num_chunks", 2),
                                                  ("rank", 0), ("kv_bytes_per_block", page),
                                                  ("kv_bytes_per_chunk", page), ("cpu_page_size", page))
                  if name in inspect.signature(region_cls).parameters}
        if "barrier" in inspect.signature(region_cls).parameters:
            # vLLM 0.30+: the creator unlinks its file once every opener passed the barrier (the stand-in's,
            # which returns at once: the region's one opener is its creator), so the region leaves no file itself.
            region = region_cls(**kwargs, barrier=spec._all_workers_barrier)
            assert not os.path.exists(region.mmap_path) and standins.remove_regions(engine_id) == []
            return
        region = region_cls(**kwargs)
        assert os.path.exists(region.mmap_path) and engine_id in region.mmap_path
        assert standins.remove_regions(engine_id) == [region.mmap_path]
        assert not os.path.exists(region.mmap_path), "nothing left behind in /dev/shm"
    finally:
        standins.uninstall()
        standins.remove_regions()
