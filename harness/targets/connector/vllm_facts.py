"""What kvconform knows about the installed vLLM's connectors: reviewed data (each connector's kind, what it needs
beyond CPU torch, its by-design refusals) and the lookups built on it (the names vLLM registers, the extra config a
connector needs to start here, why one cannot run here, what a `vllm:Name` spec names).

The target (`harness.targets.connector.vllm_target`) and the adapter (`harness.targets.connector.vllm_adapter`) both read
these facts; the facts import neither, so imports run one way: selection -> target -> adapter -> facts.
"""

from __future__ import annotations

import ast
import atexit
import functools
import importlib.util
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.errors import UsageError
from harness.target_spec import VLLM_PREFIX, TargetError
from harness.targets.vllm_install import import_vllm_modules, installed_vllm_version

_MULTI = re.compile(r"^MultiConnector\[(?P<children>[A-Za-z0-9_,]+)\]$")
# What kind of connector each of vLLM's is (harness.targets.connector.profile; reviewed data, read from each
# connector's docstring and lookup in vLLM 0.33.0). Connectors absent here store and load KV.
KINDS: dict[str, str] = {
    "DecodeBenchConnector": "dummy",  # a benchmark stub: claims every prompt and fills its KV with dummy values
    "NixlConnector": "transfer", "NixlPullConnector": "transfer", "NixlPushConnector": "transfer",
    "MooncakeConnector": "transfer", "MoRIIOConnector": "transfer", "P2pNcclConnector": "transfer",
}

# Whose store each of vLLM's storing connectors has (harness.targets.connector.profile, `store_scope`; reviewed
# data, vLLM 0.33.0). Absent: shared by the engines of one process (a file store, a server). "engine": the CPU
# tier belongs to the connector instances of one engine, so a second engine starts with an empty tier:
# OffloadingConnector's index is the scheduler instance's `CPUOffloadingManager` (`CPUOffloadingSpec.get_manager`,
# built per spec, v1/kv_offload/cpu/spec.py) and its bytes the worker's `CPUOffloadingWorker` buffers;
# SimpleCPUOffloadConnector's index is the scheduler instance's `SimpleCPUOffloadScheduler` (its own block pool and
# coordinator over `cpu_kv_cache_config`, v1/simple_kv_offload/manager.py) and its bytes the worker's CPU tensors.
STORE_SCOPES: dict[str, str] = {
    "OffloadingConnector": "engine",
    "SimpleCPUOffloadConnector": "engine",
}

# The extra-config key that sets the size, in tokens, of the blocks each of vLLM's storing connectors stores
# (connector_profile `block_size_option`, check C40; reviewed data): OffloadingConnector's offloaded block,
# `OffloadingSpec.__init__` (v1/kv_offload/spec.py, 0.13.0 and 0.14.0 lines 34-39: `int(extra_config.get("block_size",
# gpu_block_size))`, asserted a multiple of the GPU block). Absent: the connector stores at a size of its own.
BLOCK_SIZE_OPTIONS: dict[str, str] = {
    "OffloadingConnector": "block_size",
}

# vLLM's example connectors: reference code and a benchmark stub that vLLM ships to show the API, not connectors
# people deploy (reviewed data: ExampleConnector's docstring calls it an example, ExampleHiddenStatesConnector is
# its hidden-states twin, DecodeBenchConnector fills dummy KV for decode benchmarks). Reports list them, and a
# MultiConnector with one of them as a child (kvconform's default pairing, a composition nobody deploys), in a
# block of their own, apart from the connectors people deploy.
EXAMPLE_CONNECTORS = ("ExampleConnector", "ExampleHiddenStatesConnector", "DecodeBenchConnector")


def is_example(name: str) -> bool:
    """Whether the report name `name` ("ExampleConnector", "MultiConnector[ExampleConnector,OffloadingConnector]")
    is one of vLLM's example connectors or a MultiConnector with one as a child."""
    match = _MULTI.match(name)
    names = match.group("children").split(",") if match else [name]
    return any(n in EXAMPLE_CONNECTORS for n in names)


@dataclass(frozen=True)
class Requirement:
    """What a connector needs beyond CPU torch: importable modules and/or a CUDA device (reviewed data,
    read from each connector's imports and constructor in vLLM 0.33.0)."""

    modules: tuple[str, ...] = ()
    cuda: bool = False
    why: str = ""
    model: str = ""  # a model feature no preset has: the connector is not applicable to the suite's presets
    # The worker needs CUDA only for device plumbing (platform check, streams, events, pinned memory, the copy
    # kernel): without CUDA it runs on kvconform's CPU stand-ins (harness.targets.connector.vllm_device_standins).
    cpu_standins: bool = False
    # Why the connector cannot be judged in a test process it shares with other checks and connectors (the
    # suite builds many engines per process): it is then not run, with this reason, and is no MultiConnector child.
    shared_process: str = ""


# Connector name -> requirement. Connectors absent here need nothing beyond vLLM itself.
REQUIREMENTS: dict[str, Requirement] = {
    "ExampleHiddenStatesConnector": Requirement(model="extracts hidden states into a KV cache group of their own "
                                                      "(HiddenStateCacheSpec), which no preset has"),
    "HiSparseConnector": Requirement(model="needs a sparse-attention model with a HiSparse host pool "
                                           "(HiSparse groups), which no preset has"),
    "OffloadingConnector": Requirement(cuda=True, cpu_standins=True,
                                       why="CPU offloading worker: CPUOffloadingSpec.get_worker refuses platforms "
                                           "other than CUDA-alike and XPU"),
    "SimpleCPUOffloadConnector": Requirement(cuda=True, cpu_standins=True,
                                             why="copy streams: the worker creates torch.cuda.Stream"),
    "NixlConnector": Requirement(("nixl",), why="NIXL transfer library (UCX/RDMA)"),
    "NixlPullConnector": Requirement(("nixl",), why="NIXL transfer library (UCX/RDMA)"),
    "NixlPushConnector": Requirement(("nixl",), why="NIXL transfer library (UCX/RDMA)"),
    "MooncakeConnector": Requirement(("mooncake",), why="Mooncake transfer engine"),
    "MooncakeStoreConnector": Requirement(("mooncake",), why="Mooncake store"),
    "LMCacheConnectorV1": Requirement(
        ("lmcache",), why="LMCache engine",
        shared_process="every instance in a process shares one LMCacheEngine (lmcache 0.5.6: the adapter "
                       "builds it as LMCacheEngineBuilder.get_or_create(ENGINE_NAME, ...) with a config created "
                       "once per process, lmcache/integration/vllm/vllm_v1_adapter.py and utils.py), so no check "
                       "gets a store, a model or a layout of its own, and a process where it ran measured 58 "
                       "failing cells of SimpleCPUOffloadConnector instead of 9; LMCache is judged through "
                       "LMCacheMPConnector (CI step lmcache)"),
    "LMCacheMPConnector": Requirement(("lmcache",), why="LMCache multi-process adapter"),
    "FlexKVConnectorV1": Requirement(("flexkv",), why="FlexKV engine"),
    "HF3FSKVConnector": Requirement(("hf3fs_fuse",), cuda=True, why="3FS client (hf3fs_fuse) and CUDA copies"),
    "MoRIIOConnector": Requirement(("mori",), cuda=True, why="MoRI-IO (ROCm)"),
    "P2pNcclConnector": Requirement(cuda=True, why="NCCL point-to-point"),
    # vLLM 0.34.0: both UMBP runtimes (embedded, standalone) import MORI's UMBP client (`mori.cpp`, MORI built
    # with BUILD_UMBP=ON) when the worker starts.
    "UMBPStoreConnector": Requirement(("mori",), why="UMBP runtime (MORI's UMBP client, mori.cpp)"),
}

# Connector name -> (text of its by-design refusal of several KV cache groups, what it means): reviewed data
# (LMCache 0.5.6, lmcache/v1/multiprocess: the engine-driven transfer mode, the only one a CPU worker has,
# raises this ValueError at register_kv_caches for more than one KV transfer group).
MULTI_GROUP_REFUSALS: dict[str, tuple[str, str]] = {
    "LMCacheMPConnector": ("engine-driven transfer does not support multiple KV transfer groups",
                           "LMCache's engine-driven transfer mode"),
}

# Connector name -> its start-up refusals of a Mamba group in mamba_cache_mode 'none', (text, what it means) for
# each form a release words it in: reviewed data (vLLM 0.33.0; SimpleCPUOffloadConnector's second, 0.32.0). vLLM
# caches Mamba prefixes only in 'align' mode (its engine turns 'align' on with prefix caching); both CPU-offloading
# connectors need prefix caching and refuse the 'none' mode with an AssertionError at construction, which is their
# by-design refusal of that configuration, not a silent accept.
MAMBA_NONE_REFUSALS: dict[str, tuple[tuple[str, str], ...]] = {
    "SimpleCPUOffloadConnector": (
        ("Mamba prefix caching requires mamba_cache_mode='align'",
         "its CPU tier's coordinator is vLLM's own KV cache coordinator with prefix caching on, whose MambaManager "
         "(v1/core/single_type_kv_cache_manager.py) asserts 'align'"),
        # vLLM 0.32.0 (its MambaManager has no such assert): the connector sizes its coordinator with
        # `resolve_kv_cache_block_sizes`, which backs off to the scheduler block for a Mamba group outside 'align'
        # mode ("Mamba groups outside align mode break divisibility", kv_cache_utils.py), and the coordinator
        # asserts every group's block divisible by it (kv_cache_coordinator.py:660-665)
        ("Each KV cache group's real block_size must be divisible by hash_block_size",
         "its CPU tier's coordinator hashes at the scheduler block once a Mamba group is not in 'align' mode "
         "(resolve_kv_cache_block_sizes), and vLLM's HybridKVCacheCoordinator asserts every group's block size a "
         "multiple of it"),
    ),
    "OffloadingConnector": (
        ("need --enable-prefix-caching to align block sizes",
         "build_offloading_config (v1/offloading/config.py) asserts that every group's block size is a multiple of "
         "the hash block size, which a Mamba group in 'none' mode is not"),
    ),
}


# Extra config kvconform gives a connector unless the user's --kv-connector-extra-config says otherwise:
# enough for it to start on this machine, with a private store.
STORE_ROOT_ENV = "KVCONFORM_VLLM_STORE_ROOT"


@functools.lru_cache(maxsize=None)
def _store_root() -> str:
    inherited = os.environ.get(STORE_ROOT_ENV)
    if inherited:
        return inherited  # a check's child process (C36) reads the stores of the process that started it
    root = tempfile.mkdtemp(prefix="kvconform-vllm-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)  # the stores live as long as the process
    os.environ[STORE_ROOT_ENV] = root
    return root


@functools.lru_cache(maxsize=None)
def _store_dir(name: str) -> str:
    # One directory per connector under test under the process's root: both roles, and every engine of a
    # run, share the store; a MultiConnector's child gets its own ("MultiConnector.0.ExampleConnector"), so
    # what the MultiConnector's checks store never shows up as a hit in the checks of the connector on its own.
    path = os.path.join(_store_root(), name)
    os.makedirs(path, exist_ok=True)
    return path


def default_multi_children() -> tuple[str, ...]:
    """The children of `vllm:MultiConnector` without a list: two connectors that store KV and can run here
    (the first two of them; ExampleConnector twice when only it can), so what the MultiConnector's checks find
    is about fanning out over stores, not about a child that claims every prompt. Only connectors that need no
    package beyond vLLM qualify: the pairing depends on the vLLM release, never on what else the venv has."""
    names = [n for n in registered_names() if n != "MultiConnector" and KINDS.get(n, "stores") == "stores"
             and missing_requirement(n) is None and not REQUIREMENTS.get(n, Requirement()).modules]
    preferred = ["ExampleConnector"] + [n for n in names if n != "ExampleConnector"]
    usable = [n for n in preferred if n in names]
    return tuple(usable[:2]) if len(usable) >= 2 else ("ExampleConnector", "ExampleConnector")


def default_extra_config(name: str, within: str | None = None) -> dict:
    """The extra config `name` needs to start here (a private store directory, a CPU capacity); `within`:
    the connector under test when `name` is one of its children."""
    if name in ("ExampleConnector", "ExampleHiddenStatesConnector"):
        return {"shared_storage_path": _store_dir(f"{within}.{name}" if within else name)}
    if name in ("OffloadingConnector", "SimpleCPUOffloadConnector"):
        return {"cpu_bytes_to_use": 64 << 20}  # the CPU tier's size (vLLM's default wants a GPU's worth)
    if name == "LMCacheMPConnector":
        # LMCache's real multi-process server, started by the suite (harness.targets.connector.lmcache_server).
        from harness.targets.connector import lmcache_server

        server = lmcache_server.shared()
        return {"lmcache.mp.host": server.host, "lmcache.mp.port": server.port}
    return {}


#: A file of the names the installed vLLM registers, read instead of importing vLLM (about 6-10 CPU s): its first
#: line `vllm X.Y.Z`, then one name a line, as `python -m harness.targets.connector.vllm_target --names-file FILE`
#: writes it. The vLLM CI job writes it once per release, and its connector steps' pytest controllers, which
#: import vLLM only to check the `--kv-connector vllm:Name` options, read it. A file for another release, or one
#: that cannot be read, is ignored.
REGISTERED_NAMES_ENV = "KVCONFORM_VLLM_REGISTERED_CONNECTORS"


def registered_names() -> list[str]:
    """The connector names the installed vLLM's factory registers (exit 4 when vLLM is unusable)."""
    version = installed_vllm_version()
    listed = _listed_names(version)
    if listed is not None:
        return listed
    import_vllm_modules(version)
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    return sorted(KVConnectorFactory._registry)  # the factory has no public listing


def names_file_text(version: str, names: list[str]) -> str:
    """The text of a `REGISTERED_NAMES_ENV` file: the release, then the names."""
    return "".join(f"{line}\n" for line in (f"vllm {version}", *names))


def _listed_names(version: str) -> list[str] | None:
    """The names the `REGISTERED_NAMES_ENV` file lists for `version`, or None (no file, another release)."""
    path = os.environ.get(REGISTERED_NAMES_ENV)
    if not path:
        return None
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if not lines or lines[0] != f"vllm {version}":
        return None
    return sorted(lines[1:])


def model_requirement(name: str) -> str | None:
    """What model `name` needs that the suite's presets are not (the reason its checks are not applicable, kind
    `feature`), or None."""
    need = REQUIREMENTS.get(name)
    return f"{name} {need.model}" if need is not None and need.model else None


def missing_requirement(name: str) -> str | None:
    """One line saying why `name` cannot run on this machine, or None when it can be tried."""
    cause = missing_cause(name)
    if cause is None:
        return None
    from harness.outcomes import KINDS, message_of, skip_message_of  # pytest comes with it: not at import

    return message_of(**cause) if cause["kind"] in KINDS else skip_message_of(cause)


def missing_cause(name: str) -> dict | None:
    """Why `name` cannot run on this machine, as the typed record its checks skip with (`harness.outcomes`: a
    skip cause of kind `cannot-run-here`, or not applicable of kind `feature` when it needs a model the presets
    are not), or None when it can be tried."""
    need = REQUIREMENTS.get(name)
    if need is None:
        return None
    from harness.outcomes import not_applicable_record, skip_cause  # pytest comes with it: not at import

    if need.model:
        return not_applicable_record("feature", model_requirement(name))
    if need.shared_process:
        return skip_cause("cannot-run-here", f"{name} cannot be judged in a test process shared with other checks: "
                                             f"{need.shared_process}", needs="process")
    absent = [m for m in need.modules if importlib.util.find_spec(m) is None]
    if absent:
        return skip_cause("cannot-run-here", f"{name} needs the {need.why} (package "
                                             f"{', '.join(repr(m) for m in absent)} is not installed)",
                          needs="package", packages=absent)
    if need.cuda:
        import torch

        if torch.cuda.is_available():
            return None
        if not need.cpu_standins:
            return skip_cause("cannot-run-here", f"{name} needs CUDA ({need.why}); no CUDA device is visible",
                              needs="cuda")
        from harness.targets.connector.vllm_device_standins import uncovered_modules

        uncovered = uncovered_modules(name)
        if uncovered:
            return skip_cause("cannot-run-here", f"{name} needs CUDA ({need.why}); no CUDA device is visible, and "
                                                 f"this vLLM lacks the worker modules or names kvconform's CPU "
                                                 f"stand-ins patch ({', '.join(uncovered)}): its worker is laid out "
                                                 "otherwise and would still reach CUDA", needs="cuda")
    return None


def declares_hma_in_source(name: str) -> bool:
    """Whether the source of vLLM's class `name` lists SupportsHMA among its bases, read without importing
    the module (for a connector whose module does not import here)."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    loader = KVConnectorFactory._registry[name]
    cells = dict(zip(loader.__code__.co_freevars, (c.cell_contents for c in loader.__closure__ or ())))
    module_path, class_name = cells.get("module_path"), cells.get("class_name", name)
    spec = importlib.util.find_spec(module_path) if module_path else None
    if spec is None or not spec.origin:
        return False
    tree = ast.parse(Path(spec.origin).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return any((getattr(b, "id", None) or getattr(b, "attr", None)) == "SupportsHMA" for b in node.bases)
    return False


def needs_cuda(name: str) -> bool:
    """True when `name`'s worker needs a CUDA device (the adapter then hands it device mirrors)."""
    need = REQUIREMENTS.get(name)
    return bool(need and need.cuda)


def runs_on_standins(name: str) -> bool:
    """True when `name`'s worker needs CUDA only for device plumbing that kvconform's CPU stand-ins replace
    (used when no CUDA device is visible)."""
    need = REQUIREMENTS.get(name)
    return bool(need and need.cpu_standins)


def parse_name(spec: str) -> tuple[str, tuple[str, ...]]:
    """`vllm:Name` -> (Name, ()); `vllm:MultiConnector[A,B]` -> ("MultiConnector", (A, B))."""
    name = spec[len(VLLM_PREFIX):] if spec.startswith(VLLM_PREFIX) else spec
    match = _MULTI.match(name)
    if match:
        return "MultiConnector", tuple(c for c in match.group("children").split(",") if c)
    if name == "MultiConnector":
        return name, default_multi_children()
    return name, ()


def validate_spec(spec: str, option: str = "--kv-connector") -> None:
    """TargetError (exit 4, one line) unless every name in `spec` is registered by the installed vLLM."""
    name, children = parse_name(spec)
    try:
        known = registered_names()
    except UsageError as exc:  # no usable vLLM: its reason, under the option that asked for it
        raise TargetError(option, spec, str(exc)) from None
    for each in (name, *children):
        if each not in known:
            raise TargetError(option, spec, f"vLLM {installed_vllm_version()} registers no connector {each!r}; "
                                            f"registered: {', '.join(known)}")
    if children and "MultiConnector" in children:
        raise TargetError(option, spec, f"a MultiConnector child cannot be MultiConnector; accepted: "
                                        f"vllm:MultiConnector[A,B] with A, B from {', '.join(known)}")


@functools.lru_cache(maxsize=1)
def multi_others_get_blocks() -> bool:
    """Whether the installed vLLM's MultiConnector hands the children that do not load the request's real blocks
    in `update_state_after_alloc` (0.32.0 on), rather than an empty table (up to 0.22.0). Probed on the release's
    own class: two recording children, a request no child loads, a block table whose `new_empty()` is told apart."""
    from vllm.distributed.kv_transfer.kv_connector.v1.multi_connector import MultiConnector

    seen: list = []

    class _Child:
        def update_state_after_alloc(self, request, blocks, num_external_tokens):
            seen.append(blocks)

    class _Blocks:
        def new_empty(self):
            return "empty"

    multi = object.__new__(MultiConnector)
    multi._connectors = [_Child(), _Child()]
    multi._requests_to_connector = {}
    blocks = _Blocks()
    multi.update_state_after_alloc(type("Request", (), {"request_id": "probe"})(), blocks, 0)
    if not seen or any(b is not blocks and b != "empty" for b in seen):
        raise RuntimeError(f"vLLM {installed_vllm_version()}'s MultiConnector.update_state_after_alloc handed its "
                           f"children {seen!r}: neither the table nor its new_empty()")
    return all(b is blocks for b in seen)
