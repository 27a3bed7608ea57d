"""What one vLLM release's KV-connector API offers: the connector target's capability table, read from the
release itself (or from kvconform's connector protocol, which keeps vLLM's names and has every row).

A connector check that needs an API the release under test lacks is not a failure of that release's
connectors: it is "N/A on X.Y.Z: reason" (a skip with that reason), so a clean run on any supported release is
green and `kvconform diff` of two releases' runs lists only what changed in behaviour. A check asks for what it
needs with `CheckContext.require(name)` (`suites/connector/context.py`); the vLLM adapter
(`harness.targets.connector.vllm_adapter`) asks the same table which hooks vLLM would call (`release_has`).

Each row is probed from the installed release's own code (a class, a method of `KVConnectorBase_V1`, a
dataclass field), never from a version number or a connector's name, so a release kvconform has never seen
gets a correct table too. Two kinds of row:

* `CAPABILITIES`: features of the connector API (hooks vLLM calls, fields it reports through). kvconform's
  connector protocol (`reference_impl.connector`, what the reference and vendor connectors implement) has
  every one; a release without one makes the checks that declare it N/A.
* `FORMS`: how vLLM-internal objects the adapter builds are shaped (the registered KV layout, the block state
  handed to connectors, ...). The adapter meets either shape, no check depends on one, and kvconform's
  protocol has no counterpart: they live here so that every release probe has one home.

`docs/connector-releases.md` lists the table for the releases checked by hand (0.13.0, 0.33.0, 0.34.0);
`python -m harness.targets.connector.capabilities` prints the installed release's table as JSON.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import sys
from collections.abc import Mapping

from harness.targets.allocator.capabilities import CAPABILITIES as ALLOCATOR_CAPABILITIES
from harness.targets.allocator.capabilities import (Capability, ReleaseModules, fields_of, not_applicable,
                                                    probe_capabilities)

__all__ = ["CAPABILITIES", "FORMS", "PROBED_MODULES", "REFERENCE_MODULES", "VLLM_MODULES", "ReleaseTable",
           "reference_table", "installed_vllm_table", "release_has"]

#: The short names the probes read -> vLLM's module name (a key of a module map).
PROBED_MODULES = {"base": "distributed.kv_transfer.kv_connector.v1.base", "outputs": "v1.outputs",
                  "sched": "v1.core.sched.output", "iface": "v1.kv_cache_interface",
                  "forward_context": "forward_context", "config": "config", "scheduler": "v1.core.sched.scheduler",
                  "flash_attn": "v1.attention.backends.flash_attn", "model_runner": "v1.worker.gpu_model_runner",
                  "kv_utils": "v1.core.kv_cache_utils", "worker_utils": "v1.worker.utils"}
#: vLLM's module name -> the installed vLLM's module.
VLLM_MODULES = {name: f"vllm.{name}" for name in PROBED_MODULES.values()}
#: vLLM's module name -> where kvconform's connector protocol keeps it (the connector API modules only: the
#: adapter's FORMS are vLLM's internals, which the protocol does not have).
REFERENCE_MODULES = {"distributed.kv_transfer.kv_connector.v1.base": "reference_impl.connector.base",
                     "v1.outputs": "reference_impl.connector.base",
                     "v1.kv_cache_interface": "reference_impl.kv_cache.kv_cache_interface",
                     "v1.core.sched.output": "reference_impl.engine.outputs",
                     "v1.core.kv_cache_utils": "reference_impl.kv_cache.kv_cache_utils"}


#: The geometry the layout probes ask FlashAttention's `get_kv_cache_shape` for: every size distinct (and the
#: packed content `2 * head size` too), so each axis of the answer is recognisable.
_PROBE_GEOMETRY = {"num_blocks": 5, "block_size": 16, "num_kv_heads": 3, "head_size": 24}


def _flash_attention_shape(m) -> tuple[int, ...]:
    """The logical shape of one layer's KV cache as the release's FlashAttention backend declares it for
    `_PROBE_GEOMETRY` (the shape its model runner registers with connectors)."""
    return tuple(m["flash_attn"].FlashAttentionBackend.get_kv_cache_shape(**_PROBE_GEOMETRY))


def _hook(name: str):
    """A probe: `KVConnectorBase_V1` declares the hook `name` (vLLM calls a hook its base class declares)."""
    return lambda m: callable(getattr(m["base"].KVConnectorBase_V1, name, None))


# name -> Capability. `mods` holds the modules by the short names of PROBED_MODULES (None for one absent).
CAPABILITIES: dict[str, Capability] = {c.name: c for c in (
    Capability("hma", "no SupportsHMA / request_finished_all_groups (no connector can run on a model with several "
               "KV cache groups)",
               lambda m: callable(getattr(m["base"], "supports_hma", None))
               and callable(getattr(m["base"].SupportsHMA, "request_finished_all_groups", None))),
    Capability("loaded_group_ids", "KVConnectorBase_V1 has no get_loaded_kv_cache_group_ids (the scheduler takes "
               "every group as loaded; the connector cannot say which)", _hook("get_loaded_kv_cache_group_ids")),
    Capability("on_new_request", "KVConnectorBase_V1 has no on_new_request (a connector first sees a request at "
               "its lookup)", _hook("on_new_request")),
    Capability("bind_kv_cache_manager", "KVConnectorBase_V1 has no bind_kv_cache_manager (a connector never sees "
               "the scheduler's KV cache manager)", _hook("bind_kv_cache_manager")),
    Capability("handle_preemptions", "KVConnectorBase_V1 has no handle_preemptions (no worker hook runs before a "
               "preempted request's blocks are reused)", _hook("handle_preemptions")),
    Capability("take_events", "KVConnectorBase_V1 has no take_events (a connector emits no KV cache events)",
               _hook("take_events")),
    Capability("worker_kv_events", "KVConnectorBase_V1 has no get_kv_connector_kv_cache_events (workers report no "
               "KV cache events)", _hook("get_kv_connector_kv_cache_events")),
    Capability("reset_cache", "KVConnectorBase_V1 has no reset_cache", _hook("reset_cache")),
    Capability("connector_stats", "KVConnectorBase_V1 has no get_kv_connector_stats / build_kv_connector_stats",
               lambda m: _hook("get_kv_connector_stats")(m) and _hook("build_kv_connector_stats")(m)),
    Capability("load_error_blocks", "KVConnectorBase_V1 has no get_block_ids_with_load_errors (a failed load "
               "cannot be reported)", _hook("get_block_ids_with_load_errors")),
    Capability("failed_recving", "KVConnectorOutput has no failed_recving (a failed load can be reported only as "
               "block ids, never per request)",
               lambda m: "failed_recving" in fields_of(m["outputs"].KVConnectorOutput)),
    Capability("transfer_results", "KVConnectorBase_V1 has no get_transfer_results / KVConnectorTransferResults "
               "(workers report finished transfers with get_finished's pair of sets)",
               lambda m: _hook("get_transfer_results")(m) and hasattr(m["base"], "KVConnectorTransferResults")),
    Capability("worker_meta", "KVConnectorBase_V1 has no build_connector_worker_meta (workers hand the scheduler "
               "no metadata of their own)",
               lambda m: _hook("build_connector_worker_meta")(m)
               and "kv_connector_worker_meta" in fields_of(m["outputs"].KVConnectorOutput)),
    Capability("resumed_req_ids", "CachedRequestData has no resumed_req_ids (a request resumed after preemption "
               "is scheduled as a new request, with its whole block table)",
               lambda m: "resumed_req_ids" in fields_of(m["sched"].CachedRequestData)),
)}

# A model with a scratch group (per-request working memory no later token reads back, which a connector must leave
# alone) needs the release to have such specs: without them the group is an ordinary full-attention one, and a
# second group of the same spec as the first is a layout vLLM never builds (vLLM 0.20's HybridKVCacheCoordinator
# asserts "at least two attention groups").
CAPABILITIES["scratch_groups"] = Capability(
    "scratch_groups", "KVCacheSpec has no prefix_cacheable (no scratch KV cache group that connectors leave alone; "
    "a model with one has no layout on this release)",
    lambda m: hasattr(m["iface"].KVCacheSpec, "prefix_cacheable"))



# A model whose Mamba 'align' group keeps a block of its own beside smaller attention blocks (the presets
# fa+mamba_align and fa+swa+mamba: full attention 16, Mamba 256) is a layout only a release that hashes it at the
# GCD builds; elsewhere the preset is a model the release never serves (its 'align' block is the attention block).
# The allocator's row (its invariants' layouts ask the same question), probed on the connector table's modules.
CAPABILITIES["mamba_align_block"] = ALLOCATOR_CAPABILITIES["mamba_align_block"]

FORMS: dict[str, Capability] = {c.name: c for c in (
    Capability("block_state", "SchedulerOutput carries no kv_connector_block_state (connectors read block tables "
               "from the scheduler output alone)",
               lambda m: hasattr(m["sched"], "KVConnectorBlockState")
               and "kv_connector_block_state" in fields_of(m["sched"].SchedulerOutput)),
    Capability("standardized_layout", "no standardized per-layer [B, H, N, C] KV views (RFC #42082): connectors "
               "register FlashAttention's split [2, B, N, H, D] layout",
               # The worker side: its KV cache allocation views every layer through the spec module's
               # standardized views (vLLM 0.29+). The spec module alone says nothing: the reference's holds the
               # same view helpers, and kvconform's protocol registers no vLLM layout.
               lambda m: hasattr(m["worker_utils"], "create_kv_cache_views")),
    Capability("cache_config_layout", "CacheConfig has no kv_cache_layout (connectors do not read the resolved "
               "KV cache layout from the config)",
               lambda m: "kv_cache_layout" in fields_of(m["config"].CacheConfig)),
    Capability("override_forward_context", "forward_context has no override_forward_context (the adapter cannot "
               "install its forward context around a worker hook)",
               lambda m: callable(getattr(m["forward_context"], "override_forward_context", None))),
    # How the releases without standardized views shape the attention tensors they register, read from their
    # FlashAttention backend: K and V planes outermost, `(2, num_blocks, block_size, heads, head_size)` (vLLM
    # 0.13-0.22); blocks outermost, `(num_blocks, 2, block_size, heads, head_size)` (0.24); K and V packed in the
    # content dim, `(num_blocks, heads, block_size, 2 * head_size)` over `(num_blocks, block_size, heads,
    # 2 * head_size)` memory (0.27, 0.28: the standardized attention view). Connectors index the axes as their
    # release lays them out (0.27's ExampleConnector reads `layer[block_ids, :, offsets]`).
    Capability("kv_blocks_outermost", "FlashAttention's KV cache puts its K and V planes outermost (2, num_blocks, "
               "block_size, heads, head_size)",
               lambda m: _flash_attention_shape(m)[0] == _PROBE_GEOMETRY["num_blocks"]),
    Capability("kv_packed_content", "FlashAttention's KV cache keeps K and V on an axis of their own (no (num_blocks, "
               "heads, block_size, 2 * head_size) packing)",
               lambda m: _flash_attention_shape(m) == tuple(_PROBE_GEOMETRY[k] for k in (
                   "num_blocks", "num_kv_heads", "block_size")) + (2 * _PROBE_GEOMETRY["head_size"],)),
    # vLLM 0.27's model runner registers a Mamba layer as one int8 view of its pages (`[num_blocks, 1, 1, page
    # bytes]`, as the standardized layout later does); older ones as the list of its state tensors.
    Capability("mamba_page_view", "the model runner registers a Mamba layer as the list of its state tensors (no "
               "[num_blocks, 1, 1, page bytes] int8 page view)",
               lambda m: re.search(r"\(\s*num_blocks,\s*1,\s*1,\s*page_size_bytes\s*\)",
                                   inspect.getsource(m["model_runner"].GPUModelRunner)) is not None),
    # Whether the release hashes blocks otherwise than kvconform's engine (vLLM 0.33's hashing): extra keys for a
    # cache salt or LoRA adapter untagged (0.20-0.30), or a coarser group's block named by its fine hashes joined
    # (0.20, 0.23). The allocator's probes of the same module, read here for the connector's adapter: a
    # connector of such a release stores under its pool's hashes and looks up its Requests' (vLLM's one hashing),
    # so the adapter hands it the pool with the release's hashes.
    Capability("release_block_hashing", "the release hashes blocks as kvconform's engine does (tagged cache salt "
               "and LoRA keys, a coarser block named by its last fine hash)",
               lambda m: not (ALLOCATOR_CAPABILITIES["tagged_extra_keys"].probe({"utils": m["kv_utils"]})
                              and ALLOCATOR_CAPABILITIES["coarse_hash_last_fine"].probe({"utils": m["kv_utils"]}))),
    # vLLM 0.13-0.28 describe the KV memory as one KVCacheTensor per layer slot, `shared_by` the layer of each
    # group at that slot (`KVCacheTensor(size, shared_by)`: the worker allocates one buffer per tensor and every
    # layer of `shared_by` views it); 0.29+ as one tensor per group with `layers` at a `layer_stride`.
    Capability("slot_tensors", "KVCacheTensor has layers (one tensor per group, its layers a layer_stride apart), "
               "not one per layer slot",
               lambda m: "layers" not in fields_of(m["iface"].KVCacheTensor)
               and "shared_by" in fields_of(m["iface"].KVCacheTensor)),
    # vLLM 0.20's Scheduler hands a connector that has `bind_gpu_block_pool` (duck-typed: no base-class hook) its
    # GPU block pool, which SimpleCPUOffloadConnector needs to find the blocks it stores; later releases hand
    # the whole manager through the `bind_kv_cache_manager` hook instead.
    Capability("gpu_block_pool_binding", "the Scheduler does not hand a connector its block pool through "
               "bind_gpu_block_pool",
               lambda m: "bind_gpu_block_pool" in inspect.getsource(m["scheduler"].Scheduler.__init__)),
)}


class ReleaseTable:
    """One implementation's probed table: `version` (what "N/A on ..." names), the rows it has, and what it
    lacks (row -> the `lacks` text), for `CAPABILITIES` and `FORMS` alike."""

    def __init__(self, version: str, module_map: Mapping[str, str]) -> None:
        mods = ReleaseModules(module_map, PROBED_MODULES)
        self.version = version
        self.capabilities, self.lacks = probe_capabilities(mods, CAPABILITIES)
        self.forms, self.forms_lacking = probe_capabilities(mods, FORMS)

    def has(self, name: str) -> bool:
        """Whether the implementation has row `name` (ValueError naming it when it is no row of the table)."""
        if name in CAPABILITIES:
            return name in self.capabilities
        if name in FORMS:
            return name in self.forms
        raise ValueError(f"capability: {name!r} is not one of {', '.join([*CAPABILITIES, *FORMS])}")

    def require(self, name: str) -> None:
        """End the running check as "N/A on VERSION: what it lacks" unless the implementation has capability
        `name` (one of `CAPABILITIES`)."""
        if name not in CAPABILITIES:
            raise ValueError(f"capability: {name!r} is not one of {', '.join(CAPABILITIES)}")
        if name in self.lacks:
            not_applicable(self.version, self.lacks[name])

    def as_dict(self) -> dict[str, bool]:
        """Row -> present, every row of both tables (what `python -m` prints, and the docs' table)."""
        return {name: self.has(name) for name in [*CAPABILITIES, *FORMS]}


@functools.lru_cache(maxsize=None)
def reference_table() -> ReleaseTable:
    """kvconform's connector protocol (reference and vendor connectors): every capability, no vLLM form."""
    return ReleaseTable("kvconform's connector protocol", REFERENCE_MODULES)


@functools.lru_cache(maxsize=None)
def installed_vllm_table() -> ReleaseTable:
    """The installed vLLM's table (probed once per process), named by its release number."""
    from harness.targets.vllm_install import installed_vllm_version

    return ReleaseTable(installed_vllm_version(), VLLM_MODULES)


def release_has(name: str) -> bool:
    """Whether the installed vLLM has row `name` of `CAPABILITIES` or `FORMS` (the adapter's one question)."""
    return installed_vllm_table().has(name)


def main() -> int:
    """`python -m harness.targets.connector.capabilities`: the installed vLLM's table as one JSON object
    (`version`, then row -> true/false)."""
    table = installed_vllm_table()
    print(json.dumps({"version": table.version, **table.as_dict()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
