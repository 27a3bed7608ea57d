"""`--kv-engine vllm`: vLLM's own `Scheduler` as the engine of the connector suite.

kvconform's engine (`reference_impl.engine.EngineCore`) imitates vLLM 0.33's scheduler. With `--kv-engine vllm`
the installed vLLM's real `vllm.v1.core.sched.scheduler.Scheduler` (on CPU, as vLLM's own connector unit tests
run it) schedules instead: it owns the requests, vLLM's KV cache manager and block pool, and it calls the
connector's scheduler side itself (`get_num_new_matched_tokens`, `update_state_after_alloc`,
`build_connector_meta`, `update_connector_output`, `request_finished[_all_groups]`). kvconform keeps the rest:
its workers execute vLLM's `SchedulerOutput` (the content oracle's KV written into real paged tensors, the
worker-side connector hooks in vLLM's order, every read checked), and their outputs go back to vLLM's
`update_from_output` as a `ModelRunnerOutput` with a `KVConnectorOutput`.

`VllmSchedulerEngine` offers `EngineCore`'s surface (what the checks use), so the suite's checks run unchanged
on either engine; what this engine cannot express ends the check as "N/A under --kv-engine vllm: reason".
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import types
import uuid
from collections import ChainMap, Counter
from unittest import mock

from harness import outcomes
from harness.targets.connector.capabilities import release_has
from suites.connector.runner import ConnectorGuard, ConnectorHookError, make_guard_class
from harness.targets.connector.vllm_adapter import (VllmConnectorAdapter, _make, _vllm, vllm_config_for,
                                                    vllm_kv_cache_config)
from reference_impl.connector.base import KVConnectorRole, supports_hma
from reference_impl.engine import content
from reference_impl.engine.core import EngineCore
from reference_impl.engine.outputs import CachedRequestData, NewRequestData, SchedulerOutput
from reference_impl.engine.presets import get_preset
from reference_impl.kv_cache.kv_cache_interface import MambaSpec, ScratchSpec

def not_applicable_on_vllm(reason: str, check: str | None = None) -> None:
    """End the check as N/A (kind `engine`): its scenario needs something vLLM's scheduler does not offer
    (`check`: the check id the message names before the reason)."""
    outcomes.not_applicable("engine", reason, check=check)


#: Why a check that puts the connector into kvconform's MultiConnector is N/A on vLLM's scheduler.
VLLM_MULTI_CONNECTOR = ("puts the connector into kvconform's MultiConnector, and a vLLM connector there is driven "
                        "through kvconform's adapter, which takes kvconform's engine types, not the ones vLLM's "
                        "scheduler hands the MultiConnector")


@functools.lru_cache(maxsize=None)
def _v():
    """vLLM's modules this engine uses (imported once, on first use): the connector adapter's (`_vllm`, which
    also sets vLLM's NONE_HASH) plus the scheduler's."""
    from vllm.v1.core.sched import scheduler
    from vllm.v1.structured_output import StructuredOutputManager

    return types.SimpleNamespace(**vars(_vllm()), scheduler=scheduler, StructuredOutputManager=StructuredOutputManager)


class _FinishedFlag:
    """`request.is_finished` read both ways: the suite reads a property (a bool), vLLM calls a method."""

    __slots__ = ("_value",)

    def __init__(self, value: bool) -> None:
        self._value = value

    def __bool__(self) -> bool:
        return self._value

    def __call__(self) -> bool:
        return self._value

    def __repr__(self) -> str:
        return repr(self._value)


@functools.lru_cache(maxsize=None)
def _request_class():
    """vLLM's Request class as the suite reads it (built once vLLM is imported)."""
    base = _v().request.Request

    class VllmEngineRequest(base):
        """vLLM's `Request` plus what the suite reads of an engine request: the admission's local and external
        hit (`num_local_computed_tokens`, `num_external_computed_tokens`, recorded as vLLM's scheduler hands them
        to the connector), and `is_finished` usable as a property or a method."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.num_local_computed_tokens = 0
            self.num_external_computed_tokens = 0

        @property
        def is_finished(self):
            """True once stopped or aborted (callable as vLLM calls it)."""
            return _FinishedFlag(_v().request.RequestStatus.is_finished(self.status))

    return VllmEngineRequest


@functools.lru_cache(maxsize=None)
def _guard_class(hma: bool) -> type:
    """A ConnectorGuard that vLLM's scheduler takes for an HMA connector exactly when `hma` (vLLM checks
    `isinstance(connector, SupportsHMA)` with its own class)."""
    def take_events(self):
        # vLLM's connectors may yield their events: listed once, so the suite and vLLM see the same ones.
        return list(ConnectorGuard.__getattr__(self, "take_events")() or ())

    if not hma:
        return make_guard_class("VllmSchedulerGuard", None, {"take_events": take_events})

    def request_finished_all_groups(self, request, block_ids):
        return ConnectorGuard.__getattr__(self, "request_finished_all_groups")(request, block_ids)

    return make_guard_class("VllmSchedulerGuardHMA", _v().base.SupportsHMA,
                            {"request_finished_all_groups": request_finished_all_groups, "take_events": take_events})


def _scheduler_side(guard):
    """(vLLM-facing guarded connector, vllm_config, vLLM KVCacheConfig or None) for the scheduler-role instance
    the check's factory built: a `vllm:` target's adapter gives its vLLM connector (and the VllmConfig and
    KVCacheConfig it was built with); any other class is handed to vLLM's scheduler as it is."""
    inner = guard.inner
    if isinstance(inner, VllmConnectorAdapter):
        native, hma = inner.inner, _v().base.supports_hma(inner.inner)
        vllm_config, kv_cache_config = inner.vllm_config, inner.vllm_kv_cache_config
    else:
        native, hma, vllm_config, kv_cache_config = inner, supports_hma(type(inner)), None, None
    rewrapped = _guard_class(hma)(native, KVConnectorRole.SCHEDULER, guard.calls, guard.around,
                                  object.__getattribute__(guard, "_state"),
                                  object.__getattribute__(guard, "_backdoors"))
    return rewrapped, vllm_config, kv_cache_config


# The model vLLM's scheduler is told it serves (it reads tokenizer, multimodal, sampling and runner facts of the
# model config): a small published config (reviewed data, `harness/upstream/model_configs.json`) in a temporary
# folder, so nothing is downloaded; every attribute connectors read is answered from the preset first.
SCHEDULER_MODEL = "facebook/opt-125m"


@functools.lru_cache(maxsize=None)
def _plain_model_config():
    """A real ModelConfig of SCHEDULER_MODEL's config, built once per process (its folder removed at exit)."""
    import atexit
    import json
    import shutil
    import tempfile
    from pathlib import Path

    from harness.upstream.offline_hub import load_model_configs
    from vllm.config import ModelConfig

    folder = Path(tempfile.mkdtemp(prefix="kvconform-model-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    (folder / "config.json").write_text(json.dumps(load_model_configs()[SCHEDULER_MODEL]), encoding="utf-8")
    return ModelConfig(model=str(folder), skip_tokenizer_init=True, dtype="float16", seed=0)


class _SchedulerModelConfig:
    """`model_config` as vLLM's scheduler gets it: the preset's answers (`PresetModelConfig`: name, length, heads,
    layers), and for everything else a plain text decoder's real `ModelConfig` (no tokenizer, no multimodal
    input)."""

    def __init__(self, preset_config) -> None:
        self._preset = preset_config

    def __getattr__(self, name):
        try:
            return getattr(self._preset, name)
        except AttributeError:
            return getattr(_plain_model_config(), name)


def _scheduler_config(engine_config, kv_cache_config, connector_name: str | None, extra: dict, module_path: str | None,
                      given=None):
    """The VllmConfig vLLM's scheduler gets: the one the connector was built with (a `vllm:` target), else one
    made from the preset as the adapter makes it, naming the connector class and its module (none: no connector)."""
    vllm_config = given if given is not None else vllm_config_for(engine_config, kv_cache_config, connector_name, extra,
                                                                  module_path)
    vllm_config = copy.copy(vllm_config)  # the connector's own config keeps its model config
    object.__setattr__(vllm_config, "model_config", _SchedulerModelConfig(vllm_config.model_config))
    if hasattr(vllm_config.scheduler_config, "max_model_len"):
        vllm_config.scheduler_config.max_model_len = engine_config.max_model_len
    modes = {g.kv_cache_spec.mamba_cache_mode for g in kv_cache_config.kv_cache_groups
             if isinstance(g.kv_cache_spec, MambaSpec)}
    if modes and hasattr(vllm_config.cache_config, "mamba_cache_mode"):
        object.__setattr__(vllm_config.cache_config, "mamba_cache_mode", modes.pop())
    vllm_config.cache_config.num_gpu_blocks = kv_cache_config.num_blocks
    if getattr(engine_config, "async_scheduling", False):
        # As `--async-scheduling` sets it: vLLM's scheduler reads it through max_concurrent_batches (0.33's
        # defer_block_free for a consumer connector); the connector's own config keeps its scheduler config.
        scheduler_config = copy.copy(vllm_config.scheduler_config)
        object.__setattr__(scheduler_config, "async_scheduling", True)
        object.__setattr__(vllm_config, "scheduler_config", scheduler_config)
    return vllm_config


@functools.lru_cache(maxsize=None)
def _async_scheduler_base():
    """vLLM's AsyncScheduler (`vllm.v1.core.sched.async_scheduler`, present from 0.11), or None where absent."""
    try:
        from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    except ImportError:
        return None
    return AsyncScheduler


@functools.lru_cache(maxsize=None)
def _observed_scheduler_class(async_scheduling: bool = False):
    base = _async_scheduler_base() if async_scheduling else _v().scheduler.Scheduler

    class ObservedScheduler(base):
        """vLLM's Scheduler, unmodified, plus what the suite reads of an engine's scheduler: `transfers` (every
        load and delayed free started and reported finished, per request), `delayed_free` (finished requests
        whose blocks vLLM still holds for the connector), `pending_cache` (this step's sync loads) and
        `connector_events` (what `take_events` returned)."""

        def _init_observed(self) -> None:
            self.transfers: Counter = Counter()
            self.pending_cache: dict[str, int] = {}
            self.connector_events: list = []

        @property
        def delayed_free(self) -> dict:
            """Finished requests vLLM keeps (their blocks wait for a finished send or an in-flight load)."""
            return {rid: r for rid, r in self.requests.items() if r.is_finished}

    return ObservedScheduler


class _CoordinatorView:
    """vLLM's KV cache coordinator plus `has_request` (kvconform's manager vocabulary the checks use)."""

    def __init__(self, coordinator) -> None:
        self._coordinator = coordinator

    def __getattr__(self, name):
        return getattr(self._coordinator, name)

    def has_request(self, request_id: str) -> bool:
        """Whether any group holds a table for the request."""
        return any(request_id in m.req_to_blocks for m in self._coordinator.single_type_managers)


class _BlockPoolView:
    """vLLM's `BlockPool` plus `hashes_at` (a request's block hashes at another block size, vLLM's own view)."""

    def __init__(self, pool, hash_block_size: int) -> None:
        self._pool = pool
        self._hash_block_size = hash_block_size

    def __getattr__(self, name):
        return getattr(self._pool, name)

    def hashes_at(self, request, block_size: int):
        """The request's hash list viewed at `block_size`."""
        if block_size == self._hash_block_size:
            return request.block_hashes
        return _v().utils.BlockHashListWithBlockSize(request.block_hashes, self._hash_block_size, block_size)


class _ManagerView:
    """vLLM's `KVCacheManager` (the scheduler's own object: every call is vLLM's), with what kvconform's manager
    adds for the checks (the coordinator's `has_request`, the pool's `hashes_at`)."""

    def __init__(self, manager, hash_block_size: int) -> None:
        self._manager = manager
        self.coordinator = _CoordinatorView(manager.coordinator)
        self.block_pool = _BlockPoolView(manager.block_pool, hash_block_size)

    def __getattr__(self, name):
        return getattr(self._manager, name)


# vLLM's scheduler (align mode) computes a prefill past a Mamba block boundary in one step and hands the
# boundary's state to the model runner to write into a checkpoint block (`boundary_state_offloads`); kvconform's
# worker writes the state only at the end of each step (its own engine ends a step at each boundary instead).
MAMBA_CHECKPOINTS = ("vLLM's scheduler checkpoints Mamba states inside a prefill step (align mode's boundary-state "
                     "hand-offs), which kvconform's worker does not execute, so no Mamba state at a block boundary "
                     "would be written")


# A scratch group is vLLM's CircularBufferSpec: its table is a ring of blocks, not one block per position.
SCRATCH_RING = ("vLLM's scheduler gives a scratch (circular-buffer) group a ring of blocks rather than one block per "
                "position, which kvconform's worker does not address")


# Steps in a row with waiting requests, none admitted and every lookup answered, after which the check's pool
# is taken as one vLLM's scheduler does not admit into.
STUCK_STEPS = 50


def _missing_class_hook(exc: Exception) -> str | None:
    """The class attribute VllmConfig's validation found missing on the connector class ("type object 'X' has
    no attribute 'kv_cache_access'", vLLM 0.34), else None."""
    import re

    match = re.search(r"type object '[^']+' has no attribute '(\w+)'", str(exc))
    return match.group(1) if match else None


def _vllm_assertion(exc: AssertionError) -> str:
    """Where in vLLM an assertion failed, with its source line (vLLM's asserts carry no message)."""
    import linecache
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/vllm/" in f.filename]
    if not frames:
        return f"AssertionError: {exc}"
    last = frames[-1]
    line = (linecache.getline(last.filename, last.lineno) or "").strip()
    where = last.filename.split("/vllm/", 1)[1]
    return f"`{line}` failed in {last.name} (vllm/{where}:{last.lineno})" + (f": {exc}" if str(exc) else "")


def _describe_output(kv_output) -> str:
    parts = [f"{name}={sorted(getattr(kv_output, name))}" for name in
             ("finished_recving", "failed_recving", "finished_sending") if getattr(kv_output, name, None)]
    return ", ".join(parts) or "empty"


class VllmSchedulerEngine(EngineCore):
    """`EngineCore`'s surface over vLLM's `Scheduler`: vLLM schedules and calls the connector's scheduler side;
    kvconform's workers (content oracle, canaries, worker-side hooks) execute each step."""

    def __init__(self, preset, config=None, connector_factory=None):
        v = _v()
        self.preset = get_preset(preset) if isinstance(preset, str) else preset
        self.config = config
        tp = config.parallel_config.tensor_parallel_size
        self.kv_cache_config = self.preset.kv_cache_config(config.num_blocks, tp)
        if any(isinstance(g.kv_cache_spec, MambaSpec) for g in self.kv_cache_config.kv_cache_groups):
            not_applicable_on_vllm(MAMBA_CHECKPOINTS)
        if any(isinstance(g.kv_cache_spec, ScratchSpec) for g in self.kv_cache_config.kv_cache_groups):
            not_applicable_on_vllm(SCRATCH_RING)
        sizes = [g.kv_cache_spec.block_size for g in self.kv_cache_config.kv_cache_groups]
        self.hash_block_size = math.gcd(*sizes)
        self._block_hasher = v.utils.get_request_block_hasher(self.hash_block_size, v.sha256)
        self.content_salt = content.model_salt(config.model_config.model)
        ktc = config.kv_transfer_config
        connector = given_config = given_kv = None
        if connector_factory is not None:
            guard = connector_factory(self._rank_config(0), KVConnectorRole.SCHEDULER, self.kv_cache_config)
            connector, given_config, given_kv = _scheduler_side(guard)
        try:
            vllm_config = _scheduler_config(config, self.kv_cache_config, ktc.kv_connector if ktc else None,
                                            dict((ktc.kv_connector_extra_config if ktc else None) or {}),
                                            ktc.kv_connector_module_path if ktc else None, given=given_config)
        except (AttributeError, ValueError) as exc:  # raised by VllmConfig (or inside its pydantic validation)
            missing = _missing_class_hook(exc)
            if missing is None:
                raise
            not_applicable_on_vllm(
                f"this vLLM's VllmConfig calls the class-level hook {missing} of vLLM's KVConnectorBase_V1, which "
                f"{ktc.kv_connector} lacks (it is not built on vLLM's base class; vLLM needs that to configure it)")
        lookahead = getattr(vllm_config, "num_hash_lookahead_tokens", 0) or 0
        if lookahead:
            # vLLM's engine core hashes with the lookahead its config resolved (0.33+: an EAGLE-style drafter
            # beside a connector that supports lookahead hashes, or none): so do this engine's requests.
            self._block_hasher = v.utils.get_request_block_hasher(self.hash_block_size, v.sha256, lookahead)
        vllm_kv = given_kv if given_kv is not None else vllm_kv_cache_config(self.kv_cache_config)
        scheduler_block_size = math.lcm(*sizes)
        block_sizes = dict(block_size=scheduler_block_size, hash_block_size=self.hash_block_size)
        async_scheduling = bool(getattr(config, "async_scheduling", False))
        if async_scheduling and _async_scheduler_base() is None:
            not_applicable_on_vllm("this vLLM has no AsyncScheduler (vllm.v1.core.sched.async_scheduler)")
        cls = _observed_scheduler_class(async_scheduling)
        if "hash_block_size" not in inspect.signature(cls.__init__).parameters:
            # Before 0.20 the scheduler hashed, scheduled and cached at one block size, the cache config's.
            if len(set(sizes)) > 1:
                not_applicable_on_vllm(
                    f"this vLLM's Scheduler takes one block size (no hash_block_size, added in 0.20.0), and this "
                    f"preset's groups have block sizes {sorted(set(sizes))}")
            block_sizes = dict(block_size=scheduler_block_size)
        # vLLM's scheduler builds its connector through the factory; it gets the check's guarded instance.
        with mock.patch.object(v.scheduler.KVConnectorFactory, "create_connector",
                               lambda *args, **kwargs: connector):
            self.scheduler = cls(vllm_config=vllm_config, kv_cache_config=vllm_kv,
                                 structured_output_manager=v.StructuredOutputManager(vllm_config),
                                 log_stats=False, **block_sizes)
        self.scheduler._init_observed()
        self.manager = _ManagerView(self.scheduler.kv_cache_manager, self.hash_block_size)
        self._build_workers(connector_factory)
        if connector is not None:
            self._record_admissions(connector)
        self._connector = connector
        self._stuck = 0
        self._loading: set[str] = set()
        self._calls_seen = 0

    def _record_admissions(self, connector) -> None:
        """Record on each request what vLLM's scheduler hands the connector at admission (its local hit, the
        external tokens allocated), and count started delayed frees: the suite's evidence, not vLLM's state."""
        transfers = self.scheduler.transfers

        def after_lookup(_role, result, request, num_computed_tokens):
            if request.num_computed_tokens == 0:
                request.num_local_computed_tokens = num_computed_tokens

        def after_alloc(_role, result, request, blocks, num_external_tokens):
            if request.num_computed_tokens == 0:
                request.num_external_computed_tokens = num_external_tokens

        def after_finish(_role, result, request, block_ids):
            if result and result[0]:
                transfers[("send_started", request.request_id)] += 1

        def after_events(_role, result):
            self.scheduler.connector_events.extend(result or ())

        # The check's `around` is shared by every engine it builds: this engine's recorders go into a layer of
        # its own guard (the check's hooks still read through), so one engine never counts another's requests.
        around = ChainMap({}, connector.around)
        object.__setattr__(connector, "around", around)
        for hook, after in (("get_num_new_matched_tokens", after_lookup), ("update_state_after_alloc", after_alloc),
                            ("request_finished", after_finish), ("request_finished_all_groups", after_finish),
                            ("take_events", after_events)):
            before, existing = around.get(hook, (None, None))
            if existing is None:
                around[hook] = (before, after)
            else:
                around[hook] = (before, lambda *a, _e=existing, _n=after: (_e(*a), _n(*a)))

    # ---- requests ----------------------------------------------------------------------------
    def make_request(self, prompt_token_ids, *, request_id: str | None = None, max_tokens: int = 1,
                     lora_request=None, cache_salt: str | None = None, stop_token_ids=(), **kwargs):
        """A vLLM request (vLLM's block hasher at the engine's hash block size); sampling one of `stop_token_ids`
        stops it (vLLM's `check_stop`)."""
        if kwargs:
            not_applicable_on_vllm(f"requests with {sorted(kwargs)} are not expressed on vLLM's Request")
        v = _v()
        lora = None
        if lora_request is not None:
            from vllm.lora.request import LoRARequest

            lora = LoRARequest(lora_request.lora_name, lora_request.lora_int_id,
                               lora_request.lora_path or f"/kvconform/{lora_request.lora_name}")
        params = v.SamplingParams(max_tokens=max_tokens, ignore_eos=True, stop_token_ids=list(stop_token_ids) or None)
        values = dict(request_id=request_id or uuid.uuid4().hex[:12], prompt_token_ids=list(prompt_token_ids),
                      sampling_params=params, pooling_params=None, eos_token_id=None, block_hasher=self._block_hasher,
                      lora_request=lora, cache_salt=cache_salt)
        accepted = inspect.signature(v.request.Request).parameters  # keywords differ between releases
        return _request_class()(**{k: val for k, val in values.items() if k in accepted})

    def add_request(self, request):
        """Queue a request in vLLM's scheduler."""
        self.scheduler.add_request(request)
        return request

    def abort_request(self, request_id: str) -> None:
        """Abort a request (vLLM's `finish_requests`, outside a step)."""
        self.scheduler.finish_requests(request_id, _v().request.RequestStatus.FINISHED_ABORTED)

    # ---- one step ----------------------------------------------------------------------------
    def _worker_output(self, so) -> SchedulerOutput:
        """vLLM's SchedulerOutput as kvconform's workers read it (the same fields; a resumed request's tokens
        from vLLM's request, whichever way the release sends it)."""
        requests = self.scheduler.requests
        new = []
        for n in so.scheduled_new_reqs:
            tokens = list(requests[n.req_id].all_token_ids) if n.req_id in requests else list(n.prompt_token_ids)
            new.append(NewRequestData(req_id=n.req_id, prompt_token_ids=tokens,
                                      block_ids=tuple(list(g) for g in n.block_ids),
                                      num_computed_tokens=n.num_computed_tokens))
        c = so.scheduled_cached_reqs
        # A release without CachedRequestData.resumed_req_ids sends a resumed request as a new one.
        resumed = set(c.resumed_req_ids) if release_has("resumed_req_ids") else set()
        cached = CachedRequestData(
            req_ids=list(c.req_ids), resumed_req_ids=resumed,
            new_block_ids=[None if b is None else tuple(list(g) for g in b) for b in c.new_block_ids],
            num_computed_tokens=list(c.num_computed_tokens),
            all_token_ids={r: list(requests[r].all_token_ids) for r in resumed},
            new_token_ids=[[] for _ in c.req_ids])
        return SchedulerOutput(
            scheduled_new_reqs=new, scheduled_cached_reqs=cached, num_scheduled_tokens=dict(so.num_scheduled_tokens),
            total_num_scheduled_tokens=so.total_num_scheduled_tokens, finished_req_ids=set(so.finished_req_ids),
            preempted_req_ids=set(so.preempted_req_ids or ()),
            # Before 0.29 vLLM had no such flag: its runner started every load before the forward.
            has_sync_kv_loads=bool(getattr(so, "has_sync_kv_loads", True)),
            kv_connector_metadata=so.kv_connector_metadata)

    @staticmethod
    def _vllm_kv_output(kv_output):
        """The workers' aggregated output as vLLM's `KVConnectorOutput` (the fields this release has)."""
        return _make(_v().outputs.KVConnectorOutput,
                     finished_sending=set(kv_output.finished_sending or ()) or None,
                     finished_recving=set(kv_output.finished_recving or ()) or None,
                     failed_recving=set(kv_output.failed_recving or ()),
                     invalid_block_ids=set(kv_output.invalid_block_ids or ()),
                     kv_connector_stats=kv_output.kv_connector_stats, kv_cache_events=kv_output.kv_cache_events,
                     kv_connector_worker_meta=kv_output.kv_connector_worker_meta)

    def step(self, before_execute=None, after_execute=None):
        """One engine step: vLLM schedules, kvconform's workers execute, vLLM applies the output."""
        s = self.scheduler
        so = s.schedule()
        status = _v().request.RequestStatus
        loading = {rid for rid, r in s.requests.items() if r.status == status.WAITING_FOR_REMOTE_KVS}
        for req_id in loading - self._loading:  # an asynchronous load started this step
            s.transfers[("recv_started", req_id)] += 1
        # This step's sync loads: requests admitted now with external tokens (not the end of an async load).
        s.pending_cache = {n.req_id: n.num_computed_tokens for n in so.scheduled_new_reqs
                           if n.req_id not in self._loading and s.requests[n.req_id].num_external_computed_tokens}
        self._loading = loading
        kv_output, sampled = self.execute(so, self._worker_output(so), before_execute, after_execute)
        for req_id in kv_output.finished_recving or ():
            s.transfers[("recv_finished", req_id)] += 1
        for req_id in kv_output.finished_sending or ():
            s.transfers[("send_finished", req_id)] += 1
        req_ids = list(so.num_scheduled_tokens)
        # A token only for a request whose prompt is computed (vLLM's runner discards a partial prefill's sample).
        tokens = [[sampled[r]] if r in sampled and s.requests[r].num_computed_tokens >= s.requests[r].num_tokens
                  else [] for r in req_ids]
        mro = _make(_v().outputs.ModelRunnerOutput, req_ids=req_ids,
                    req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=tokens, logprobs=None,
                    prompt_logprobs_dict={}, pooler_output=None,
                    kv_connector_output=self._vllm_kv_output(kv_output) if s.connector is not None else None)
        # With async scheduling the output is applied once the next step is scheduled (EngineCore's batch queue).
        for applied, (applied_mro, applied_kv) in self.in_flight_order(so, (mro, kv_output)):
            self._apply(applied, applied_mro, applied_kv)
        self.step_count += 1
        return so

    def _apply(self, so, mro, kv_output) -> None:
        """vLLM's `update_from_output` of one executed step, then the stuck count and the after-step hooks."""
        s = self.scheduler
        try:
            s.update_from_output(so, mro)
        except AssertionError as exc:
            if isinstance(exc, ConnectorHookError):
                raise
            raise AssertionError(f"vLLM's scheduler refused what the connector reported: {_vllm_assertion(exc)} "
                                 f"(this step's KVConnectorOutput: {_describe_output(kv_output)})") from exc
        self._stuck = self._stuck + 1 if self._admits_nothing(so) else 0
        if self._stuck >= STUCK_STEPS:
            not_applicable_on_vllm(
                f"vLLM's scheduler admitted none of the {len(s.waiting)} waiting requests in {STUCK_STEPS} steps into "
                f"this check's pool of {self.config.num_blocks} blocks (its admission sizes a request's blocks its own "
                "way), so the check's scenario cannot be set up on it")
        for hook in self.after_step:
            hook(so, kv_output if s.connector is not None else None)

    def _admits_nothing(self, so) -> bool:
        """Nothing ran or is loading, requests wait, and the connector answered every lookup of the step (a
        connector that keeps answering None is the connector's liveness, judged by the checks)."""
        s = self.scheduler
        if so.total_num_scheduled_tokens or s.running or not s.waiting:
            return False
        status = _v().request.RequestStatus
        if any(r.status == status.WAITING_FOR_REMOTE_KVS for r in s.waiting):
            return False
        calls = self._connector.calls if self._connector is not None else []
        answers = [c[3] for c in calls[self._calls_seen:] if c[1] == "get_num_new_matched_tokens"]
        self._calls_seen = len(calls)
        return bool(answers) and all(a is not None and a[0] is not None for a in answers)

