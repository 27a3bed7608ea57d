"""CPU stand-ins for the CUDA pieces of vLLM's CPU-offloading connectors: the one place where kvconform puts
something of its own in place of a piece of vLLM (documented in docs/vllm-connectors.md, "CPU stand-ins").

OffloadingConnector (its CPU backend) and SimpleCPUOffloadConnector are CPU-memory tiers; what ties their
workers to a GPU is only the device plumbing around the copies. On a machine without CUDA the adapter
(`harness.targets.connector.vllm_adapter`) calls `install()` before building such a connector, which rebinds
module-level names in the listed vLLM modules (and nowhere else):

| piece            | vLLM uses                                       | stand-in                                        |
|------------------|-------------------------------------------------|-------------------------------------------------|
| platform check   | `current_platform.is_cuda_alike()/is_rocm()`    | `StandInPlatform`: answers as ROCm does (a      |
|                  |                                                 | CUDA-alike GPU whose CPU tier is a private      |
|                  |                                                 | tensor, not the shared mmap region, whose       |
|                  |                                                 | set-up needs a multi-process barrier)           |
| streams          | `torch.cuda.Stream`, `current_platform.Stream`  | `StandInStream`: ordering calls are no-ops      |
| events           | `torch.Event`                                   | `StandInEvent`: complete once recorded          |
| pinned memory    | `PIN_MEMORY` (True on vLLM's unspecified        | `False`: vLLM's own pageable-memory path        |
|                  | platform; vLLM 0.20 asks                        |                                                 |
|                  | `is_pin_memory_available()`),                   |                                                 |
|                  | `cudaHostRegister`                              |                                                 |
| copy kernel      | `ops.swap_blocks_batch`, `cuMemcpyBatchAsync`   | `swap_blocks_batch` / `batch_memcpy`: the same  |
|                  | (resolved into `_batch_memcpy`, in vLLM 0.20    | (src, dst, size) byte copies, done by memmove   |
|                  | `_batch_memcpy_fn`)                             |                                                 |
| device memory    | `assert gpu_tensor.is_cuda`                     | `DeviceMemory`: the engine's CPU KV tensors     |
|                  |                                                 | (no copy) with `is_cuda` true                   |
| device index     | `torch.accelerator.current_device_index()`      | the worker's rank, selected around each of its  |
|                  | (vLLM 0.27-0.31 pick the worker's slot of the   | calls (`selected_device`): the TP ranks share   |
|                  | shared mmap region by it)                       | this process, vLLM gives each its own device    |
| shared region    | `SharedOffloadRegion`: the CPU tier in          | vLLM's own class, its files recorded per engine |
|                  | `/dev/shm` (vLLM 0.27-0.31 on a CUDA-alike      | and removed when the engine's connector shuts   |
|                  | platform), unlinked by its creator's shutdown   | down or the process exits (`remove_regions`):   |
|                  |                                                 | a check that stops early leaves none behind     |
| openers barrier  | `_all_workers_barrier` (0.30+: gloo barrier     | returns at once: each worker connector's engine |
|                  | once every rank mapped the region's file)       | is its own, so its region has one opener        |
| copy launch      | `queue.SimpleQueue` feeding the copy thread     | `HandoffQueue`: `put` returns once the thread   |
|                  | (SimpleCPUOffloadConnector's DMA/disk backends) | has run the copy and recorded its event         |

Why the semantics are faithful: the stand-in device is synchronous, a legal (if fast) GPU schedule. Every copy
has completed when the call that launched it returns: OffloadingConnector copies inline on its "stream", and
SimpleCPUOffloadConnector's copy thread (vLLM's own) has run the copy before `launch_copy` returns, as a GPU
would have done by the next step (without the hand-off, the copy thread waits for the GIL while the engine's
fast CPU steps go by, and the blocks it pins look leaked). So an event recorded after a copy is complete, and a
stream wait has nothing to wait for. The completion is still reported the way vLLM reports it: by the
connector's own event polling and job accounting, one step later or more.
What stays vLLM's, unmodified: the connectors' scheduler and worker classes, their managers (lookups, keys,
hit rules, eviction), group handling, the transfer specs and job accounting, and the code that turns block
ids into the (src, dst, size) lists the copy kernel receives.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import importlib
import importlib.util
import inspect
import os
import threading
import time
import types

import queue
import numpy as np
import torch

# module -> names the stand-ins rebind there (the modules of vLLM 0.33's two CPU-offloading connectors), each
# where the module binds it: releases name the same piece differently (vLLM 0.20's SimpleCPUOffloadConnector
# worker and 0.21's offloading CPU worker ask `is_pin_memory_available()` where 0.33's read `PIN_MEMORY`; its cuda_mem_ops resolves the copy
# entry point into `_batch_memcpy_fn`, 0.33's into `_batch_memcpy`).
_SITES: dict[str, tuple[str, ...]] = {
    "vllm.v1.kv_offload.cpu.spec": ("current_platform", "torch", "SharedOffloadRegion", "_all_workers_barrier"),
    "vllm.v1.kv_offload.cpu.gpu_worker": ("current_platform", "torch", "ops", "PIN_MEMORY", "is_pin_memory_available"),
    "vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker": ("torch",),
    "vllm.v1.simple_kv_offload.worker": ("torch", "PIN_MEMORY", "is_pin_memory_available"),
    "vllm.v1.simple_kv_offload.copy_backend": ("current_platform", "torch", "queue"),
    "vllm.v1.simple_kv_offload.disk_backend": ("current_platform", "torch", "queue"),
    "vllm.v1.simple_kv_offload.cuda_mem_ops": ("current_platform", "_batch_memcpy", "_batch_memcpy_fn"),
}
# (module, name) -> the attribute a function or method of the module must read for that name to be rebound: a
# release whose code has that path (vLLM 0.27-0.31's CPU spec picks the worker's slot of the shared region by
# `torch.accelerator.current_device_index()`; 0.32+ by the logical rank) gets the stand-in, no other release.
_CODE_PATHS: dict[tuple[str, str], str] = {
    ("vllm.v1.kv_offload.cpu.spec", "torch"): "current_device_index",
}
# module -> groups of names of which the module must bind at least one for the stand-ins to cover it: the
# device pieces that reach CUDA when left unpatched (a release that names its pinned-memory switch or its copy
# entry point in a way listed nowhere here still reaches CUDA, and its connector cannot run here).
_ONE_OF: dict[str, tuple[tuple[str, ...], ...]] = {
    "vllm.v1.kv_offload.cpu.gpu_worker": (("PIN_MEMORY", "is_pin_memory_available"),),
    "vllm.v1.simple_kv_offload.worker": (("PIN_MEMORY", "is_pin_memory_available"),),
    "vllm.v1.simple_kv_offload.cuda_mem_ops": (("_batch_memcpy", "_batch_memcpy_fn"),),
}
# connector -> the modules among _SITES its worker runs through: all of them must import for the stand-ins to
# cover that connector's device plumbing (an older release lays its offloading worker out in other modules,
# which still reach CUDA unpatched).
_CONNECTOR_SITES: dict[str, tuple[str, ...]] = {
    "OffloadingConnector": ("vllm.v1.kv_offload.cpu.spec", "vllm.v1.kv_offload.cpu.gpu_worker",
                            "vllm.distributed.kv_transfer.kv_connector.v1.offloading.worker"),
    "SimpleCPUOffloadConnector": ("vllm.v1.simple_kv_offload.worker", "vllm.v1.simple_kv_offload.copy_backend",
                                  "vllm.v1.simple_kv_offload.cuda_mem_ops"),
}
_lock = threading.Lock()
_saved: dict[tuple[str, str], object] = {}
_device = threading.local()  # .index: the device of the worker whose call runs on this thread
_region_files: dict[str, set[str]] = {}  # engine_id -> the /dev/shm files of the shared regions made for it


class StandInEvent:
    """`torch.Event` on the CPU: complete as soon as it is recorded (the work before it already ran)."""

    def __init__(self, *args, enable_timing: bool = False, **kwargs):
        self._time: float | None = None

    def record(self, stream=None) -> None:
        """Mark now (wall clock, for `elapsed_time`)."""
        self._time = time.perf_counter()

    def query(self) -> bool:
        """Always complete: CPU copies finish before the issuing thread records an event."""
        return True

    def synchronize(self) -> None:
        """Nothing to wait for."""

    def wait(self, stream=None) -> None:
        """Nothing to wait for."""

    def elapsed_time(self, end: "StandInEvent") -> float:
        """Milliseconds between this event's record and `end`'s (0 when either was never recorded)."""
        if self._time is None or end._time is None:
            return 0.0
        return (end._time - self._time) * 1e3


class StandInStream:
    """A CUDA stream on the CPU: work submitted "on" it runs synchronously, so ordering calls are no-ops."""

    cuda_stream = 0  # the raw handle vLLM passes to the copy kernel (ignored by the stand-in kernel)

    def __init__(self, *args, priority: int = 0, **kwargs):
        self.priority = priority

    @staticmethod
    def priority_range() -> tuple[int, int]:
        """(lowest, highest) priority: a single level."""
        return 0, 0

    def wait_stream(self, other) -> None:
        """Nothing to wait for."""

    def wait_event(self, event) -> None:
        """Nothing to wait for."""

    def record_event(self, event=None):
        """Record `event` (a new one when None) now."""
        event = event or StandInEvent()
        event.record(self)
        return event

    def query(self) -> bool:
        """Always idle."""
        return True

    def synchronize(self) -> None:
        """Nothing to wait for."""


_DEFAULT_STREAM = StandInStream()


class DeviceMemory(torch.Tensor):
    """The engine's CPU KV memory presented as device memory (`is_cuda` true), without a copy: the stand-in for
    the GPU KV cache the offloading worker asserts it was given. Views of it stay `DeviceMemory`."""

    @property
    def is_cuda(self) -> bool:  # noqa: D102 - the one answer that differs from a CPU tensor
        return True


class HandoffQueue:
    """`queue.SimpleQueue` between a launcher and vLLM's copy thread, where `put` returns only once the thread
    has finished the item and come back for the next one (`None`, the shutdown sentinel, does not wait)."""

    WAIT_S = 60.0  # a copy thread that never comes back is vLLM's to report; do not hang the check forever

    def __init__(self):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._changed = threading.Condition()
        self._gets = 0
        self._puts = 0

    def get(self, *args, **kwargs):
        """The consumer: having come back for an item means the previous one is done."""
        with self._changed:
            self._gets += 1
            self._changed.notify_all()
        return self._queue.get(*args, **kwargs)

    def put(self, item, *args, **kwargs) -> None:
        """Hand `item` over and wait until the consumer is done with it."""
        with self._changed:
            self._puts += 1
            done_when = self._puts + 1  # the consumer's first get, then one per finished item
        self._queue.put(item)
        if item is None:
            return
        with self._changed:
            self._changed.wait_for(lambda: self._gets >= done_when, timeout=self.WAIT_S)

    def put_nowait(self, item) -> None:  # noqa: D102 - same as put
        self.put(item)

    def get_nowait(self):  # noqa: D102
        return self.get(block=False)

    def empty(self) -> bool:  # noqa: D102
        return self._queue.empty()

    def qsize(self) -> int:  # noqa: D102
        return self._queue.qsize()


def swap_blocks_batch(src_ptrs: torch.Tensor, dst_ptrs: torch.Tensor, sizes: torch.Tensor, *args, **kwargs) -> None:
    """vLLM's `ops.swap_blocks_batch` copy kernel on the CPU: copy `sizes[i]` bytes from `src_ptrs[i]` to
    `dst_ptrs[i]` for every i (int64 byte addresses, as vLLM computes them)."""
    for src, dst, size in zip(src_ptrs.tolist(), dst_ptrs.tolist(), sizes.tolist()):
        if size:
            ctypes.memmove(dst, src, size)


def batch_memcpy(dsts, srcs, sizes, count, attrs, attrs_idx, num_attrs, fail_idx, stream) -> int:
    """`cuMemcpyBatchAsync` on the CPU (the entry point SimpleCPUOffloadConnector resolves): `count` copies whose
    destination, source and size arrays (uint64) start at the addresses `dsts`, `srcs`, `sizes`. Returns 0
    (CUDA_SUCCESS)."""
    if count:
        arrays = (np.ctypeslib.as_array((ctypes.c_uint64 * count).from_address(a)) for a in (dsts, srcs, sizes))
        for dst, src, size in zip(*(a.tolist() for a in arrays)):
            if size:
                ctypes.memmove(dst, src, size)
    return 0


class StandInPlatform:
    """vLLM's `current_platform` as the offloading modules see it: a CUDA-alike platform that takes ROCm's
    private-host-tensor path, with stand-in streams; everything else is the real platform's answer."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def is_cuda_alike(self) -> bool:  # noqa: D102
        return True

    def is_rocm(self) -> bool:  # noqa: D102 - ROCm's path: no shared mmap region, the C++ copy kernel
        return True

    def is_cuda(self) -> bool:  # noqa: D102
        return False

    def is_xpu(self) -> bool:  # noqa: D102
        return False

    Stream = StandInStream

    @staticmethod
    def current_stream(*args, **kwargs) -> StandInStream:  # noqa: D102
        return _DEFAULT_STREAM

    @staticmethod
    def stream(stream):  # noqa: D102 - `with current_platform.stream(s):` selects nothing on the CPU
        return contextlib.nullcontext(stream)

    @staticmethod
    def set_device(device) -> None:  # noqa: D102
        return None

    @staticmethod
    def synchronize(*args, **kwargs) -> None:  # noqa: D102
        return None


def _cuda_namespace() -> types.SimpleNamespace:
    """What the offloading modules call on `torch.cuda` (vLLM 0.21's CPU worker selects its stream with
    `torch.cuda.stream(s)` where 0.33's asks `current_platform.stream(s)`)."""
    return types.SimpleNamespace(Stream=StandInStream, Event=StandInEvent, current_stream=StandInPlatform.current_stream,
                                 stream=StandInPlatform.stream, synchronize=StandInPlatform.synchronize,
                                 is_available=torch.cuda.is_available)


@contextlib.contextmanager
def selected_device(index: int):
    """Run the calls inside on stand-in device `index`: what a vLLM worker process's `set_device(local_rank)`
    selects once for all its calls. Here the TP ranks' workers share one process (and thread), so the adapter
    selects each worker's own device around each of its calls."""
    previous = getattr(_device, "index", None)
    _device.index = index
    try:
        yield
    finally:
        _device.index = previous


def current_device_index() -> int:
    """`torch.accelerator.current_device_index()` under the stand-ins: the device `selected_device` chose."""
    index = getattr(_device, "index", None)
    if index is None:
        raise RuntimeError("no stand-in device selected: torch.accelerator.current_device_index() was called "
                           "outside a worker call of harness.targets.connector.vllm_adapter")
    return index


class _AcceleratorProxy(types.ModuleType):
    """`torch.accelerator` for one vLLM module: the real one except the current device's index."""

    def __init__(self):
        super().__init__("torch.accelerator")
        self.current_device_index = current_device_index

    def __getattr__(self, name):
        return getattr(torch.accelerator, name)


class _TorchProxy(types.ModuleType):
    """`torch` for one vLLM module: the real module except `Event`, `cuda`, `accelerator`'s device index and
    (for the offloading worker, which builds its device views with `torch.tensor([]).set_(storage)` or
    `torch.empty(0).set_(storage)`) `tensor` and `empty`."""

    def __init__(self, device_memory: bool):
        super().__init__("torch")
        self.Event = StandInEvent
        self.cuda = _cuda_namespace()
        self.accelerator = _AcceleratorProxy()
        if device_memory:  # 0.33 builds a view from `torch.tensor([])`, 0.27/0.28 from `torch.empty(0)`
            self.tensor = lambda *a, **k: torch.tensor(*a, **k).as_subclass(DeviceMemory)
            self.empty = lambda *a, **k: torch.empty(*a, **k).as_subclass(DeviceMemory)

    def __getattr__(self, name):
        return getattr(torch, name)


def recording_region(real: type) -> type:
    """vLLM's `SharedOffloadRegion` (the CPU tier in a `/dev/shm` file that its creator's shutdown unlinks),
    recording each region's file under its engine so that `remove_regions` can remove what a check that stopped
    before shutting its connectors down left behind."""

    @functools.wraps(real.__init__)  # the release's signature, as vLLM's callers see it
    def __init__(self, *args, **kwargs):
        engine_id = inspect.signature(real).bind(*args, **kwargs).arguments["engine_id"]
        real.__init__(self, *args, **kwargs)
        with _lock:
            _region_files.setdefault(engine_id, set()).add(self.mmap_path)

    return type(real.__name__, (real,), {"__init__": __init__, "__module__": __name__, "__doc__": real.__doc__})


def remove_regions(engine_id: str | None = None) -> list[str]:
    """Remove the shared-region files recorded for `engine_id` (every engine's when None) that are still there
    (the region's own cleanup unlinks its file when its connector shuts down cleanly). Returns those removed."""
    with _lock:
        keys = list(_region_files) if engine_id is None else [engine_id]
        paths = sorted(p for key in keys for p in _region_files.pop(key, ()))
    removed = []
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed


def region_openers_barrier() -> None:
    """vLLM 0.30+'s `_all_workers_barrier` (a gloo barrier over every worker rank, reached once each rank has
    mapped the shared region's file) under the stand-ins: returns at once. Here each worker connector has an
    engine of its own (the adapter builds each one's config with a fresh `engine_id`), so the region's only
    opener is the worker that created it, which has mapped it when it reaches the barrier; a real barrier in
    this one process would wait forever for ranks that are built one after another."""


def pin_memory_unavailable() -> bool:
    """vLLM's `is_pin_memory_available()` under the stand-ins: no (pinning is `cudaHostRegister`)."""
    return False


def _standin(module, name: str):
    if name == "current_platform":
        return StandInPlatform(getattr(module, name))
    if name == "torch":
        return _TorchProxy(device_memory=module.__name__.endswith("offloading.worker"))
    if name == "ops":
        return types.SimpleNamespace(swap_blocks_batch=swap_blocks_batch)
    if name == "PIN_MEMORY":
        return False
    if name == "is_pin_memory_available":
        return pin_memory_unavailable
    if name == "_batch_memcpy":
        return (batch_memcpy, 1)  # (entry point, numAttrs to pass)
    if name == "_batch_memcpy_fn":
        return batch_memcpy
    if name == "SharedOffloadRegion":
        return recording_region(getattr(module, name))
    if name == "_all_workers_barrier":
        return region_openers_barrier
    if name == "queue":
        return types.SimpleNamespace(SimpleQueue=HandoffQueue, Queue=queue.Queue, Empty=queue.Empty)
    raise KeyError(name)


def code_names(module) -> set[str]:
    """The global and attribute names read by the functions and methods defined in `module` (nested code
    included): what its code can reach, read from the release rather than from its version."""
    codes = []
    for value in vars(module).values():
        if getattr(value, "__module__", None) != module.__name__:
            continue
        members = vars(value).values() if isinstance(value, type) else (value,)
        for member in members:
            code = getattr(getattr(member, "__func__", member), "__code__", None)
            if code is not None:
                codes.append(code)
    names: set[str] = set()
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes += [c for c in code.co_consts if isinstance(c, types.CodeType)]
    return names


def uncovered_modules(connector: str) -> list[str]:
    """The modules of `connector`'s worker that the stand-ins patch and that the installed vLLM lacks (its
    release lays the worker out elsewhere, so CUDA is still reached), or that bind none of the names one of
    its device pieces goes by (`module (binds none of a, b)`): empty when the stand-ins cover it."""
    missing = []
    for module_name in _CONNECTOR_SITES.get(connector, ()):
        try:
            found = importlib.util.find_spec(module_name) is not None
        except ImportError:  # a parent package is absent
            found = False
        if not found:
            missing.append(module_name)
            continue
        groups = _ONE_OF.get(module_name, ())
        if groups:
            module = importlib.import_module(module_name)
            missing += [f"{module_name} (binds none of {', '.join(group)})" for group in groups
                        if not any(hasattr(module, name) for name in group)]
    return missing


def install() -> list[str]:
    """Rebind the stand-ins in every listed vLLM module that imports here (idempotent). Returns the
    `module.name` entries it rebinds."""
    done = []
    atexit.unregister(remove_regions)  # registered once however often install() runs
    atexit.register(remove_regions)  # what a process that never shut its connectors down left behind
    with _lock:
        for module_name, names in _SITES.items():
            try:
                module = importlib.import_module(module_name)
            except ImportError:
                continue  # another vLLM release: that connector's module does not exist there
            for name in names:
                if not hasattr(module, name):
                    continue  # this release names that piece otherwise (another entry of the same list)
                path = _CODE_PATHS.get((module_name, name))
                if path is not None and path not in code_names(module):
                    continue  # this release does not take that path
                key = (module_name, name)
                if key not in _saved:
                    _saved[key] = getattr(module, name, None)
                    setattr(module, name, _standin(module, name) if name != "current_platform"
                            else StandInPlatform(_saved[key]))
                done.append(f"{module_name}.{name}")
    return done


def uninstall() -> None:
    """Put vLLM's own objects back (tests)."""
    with _lock:
        for (module_name, name), value in _saved.items():
            setattr(importlib.import_module(module_name), name, value)
        _saved.clear()


def installed() -> bool:
    """Whether the stand-ins are in place."""
    return bool(_saved)
