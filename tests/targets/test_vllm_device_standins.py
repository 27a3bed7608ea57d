"""The CPU stand-ins for the CUDA pieces of vLLM's offloading connectors (harness.targets.vllm_device_standins).

The copy kernels are checked against torch's own slice copies (an independent oracle); the stream and event
stand-ins against the semantics vLLM relies on. Installing them needs vLLM (skipped without it).
"""

from __future__ import annotations

import importlib
import random

import numpy as np
import pytest
import torch

from harness.targets import vllm_device_standins as standins


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
    pytest.importorskip("vllm.v1.kv_offload.cpu.gpu_worker", reason="needs vLLM 0.33 (scripts/install-vllm.sh 0.33.0)")
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
    from harness.targets import vllm_connector_facts as facts

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
