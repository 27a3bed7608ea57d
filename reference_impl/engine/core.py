"""`EngineCore`: one scheduler, `tp_size` workers, and the step loop (schedule, execute, aggregate, update)."""

from __future__ import annotations

import contextlib
import copy
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from reference_impl.config.objects import KVTransferConfig
from reference_impl.connector.base import KVConnectorRole
from reference_impl.connector.factory import create_connector
from reference_impl.engine import content
from reference_impl.engine.aggregator import KVOutputAggregator
from reference_impl.engine.outputs import SchedulerOutput
from reference_impl.engine.presets import ModelPreset, get_preset
from reference_impl.engine.request import EngineRequest
from reference_impl.engine.scheduler import Scheduler
from reference_impl.engine.worker import Worker
from reference_impl.kv_cache.kv_cache_utils import get_request_block_hasher
from reference_impl.kv_cache.kv_cache_manager import KVCacheManager


# Steps a run may take before it counts as stuck: generous, because a connector with an asynchronous lookup
# (LMCache's server) keeps a request waiting for as many steps as its answer takes on a loaded machine.
MAX_STEPS = 10000


@dataclass
class ModelConfig:
    """The model name connectors put into their keys."""

    model: str = "kvconform/mini"


@dataclass
class ParallelConfig:
    """Tensor parallelism: `rank` is set per worker copy."""

    tensor_parallel_size: int = 1
    rank: int = 0


@dataclass(frozen=True)
class SpeculativeConfig:
    """Speculative decoding as connectors read it from `vllm_config.speculative_config` (vLLM's field names)."""

    method: str = "eagle"  # "eagle", "eagle3", "mtp" (EAGLE-style: a drafter one token ahead), "ngram", ...
    num_speculative_tokens: int = 1

    def use_eagle(self) -> bool:
        """Whether the drafter is EAGLE-style (vLLM's `SpeculativeConfig.use_eagle`): it needs the hidden states of
        the last matched block, so a prefix hit (local, and a connector's) leaves that block to recompute."""
        return self.method in ("eagle", "eagle3", "mtp")


@dataclass
class EngineConfig:
    """The `vllm_config` connectors receive (the attributes they read), plus the engine's own knobs."""

    model_config: ModelConfig = field(default_factory=ModelConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    kv_transfer_config: KVTransferConfig | None = None
    num_blocks: int = 512
    max_model_len: int = 40960
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 16
    enable_prefix_caching: bool = True
    kernel_block_ratio: int = 1  # kernel blocks per manager block in the tensors connectors register
    # Fault injection: the model name the worker-role connectors see. A different name than the scheduler's
    # makes their store keys differ, so a load of what the scheduler found fails like a lost backend object.
    worker_model: str | None = None
    # Speculative decoding (EAGLE / MTP): the local prefix-cache hit drops its last block (KVCacheManager
    # use_eagle), and connectors read it to do the same with theirs. The engine does not draft tokens.
    speculative_config: SpeculativeConfig | None = None
    # Async scheduling (vLLM's AsyncScheduler and EngineCore.step_with_batch_queue): step N+1 is scheduled (and
    # executed) before step N's output is applied, so two steps are in flight.
    async_scheduling: bool = False


ConnectorFactory = Callable[[Any, KVConnectorRole, Any], Any]


class EngineCore:
    """The mini engine for `preset`; `connector_factory(vllm_config, role, kv_cache_config)` builds connectors.

    Without a factory, `config.kv_transfer_config` selects one through `create_connector` (with the HMA gate).
    """

    def __init__(self, preset: str | ModelPreset, config: EngineConfig | None = None,
                 connector_factory: ConnectorFactory | None = None):
        self.preset = get_preset(preset) if isinstance(preset, str) else preset
        self.config = config or EngineConfig()
        tp = self.config.parallel_config.tensor_parallel_size
        self.kv_cache_config = self.preset.kv_cache_config(self.config.num_blocks, tp)
        if connector_factory is None and self.config.kv_transfer_config is not None:
            connector_factory = create_connector
        sizes = [g.kv_cache_spec.block_size for g in self.kv_cache_config.kv_cache_groups]
        self.hash_block_size = math.gcd(*sizes)
        self.manager = KVCacheManager(self.kv_cache_config, self.config.max_model_len,
                                      enable_caching=self.config.enable_prefix_caching,
                                      hash_block_size=self.hash_block_size,
                                      # This engine's scheduler neither ends chunks at the prompt's last hash
                                      # boundary nor runs copy-on-write block copies, which fine-grained
                                      # Mamba hits need: its presets keep block-aligned hits.
                                      allow_partial_hash_hits=False,
                                      use_eagle=bool(self.config.speculative_config
                                                     and self.config.speculative_config.use_eagle()))
        self._block_hasher = get_request_block_hasher(self.hash_block_size)
        # The model's KV differs from another model's for the same tokens (a store shared by several models
        # must not serve one model's KV to another); the workers' connectors may see another name (fault
        # injection), the KV stays this model's.
        self.content_salt = content.model_salt(self.config.model_config.model)
        scheduler_connector = None
        if connector_factory is not None:
            scheduler_connector = connector_factory(self._rank_config(0), KVConnectorRole.SCHEDULER,
                                                    self.kv_cache_config)
        self.scheduler = Scheduler(self.manager, scheduler_connector,
                                   max_num_batched_tokens=self.config.max_num_batched_tokens,
                                   max_num_seqs=self.config.max_num_seqs,
                                   async_scheduling=self.config.async_scheduling)
        self._build_workers(connector_factory)

    def _build_workers(self, connector_factory: ConnectorFactory | None) -> None:
        """The workers (one per TP rank, each with its worker-role connector), the aggregator of their outputs,
        and the instrumentation lists every step runs."""
        tp = self.config.parallel_config.tensor_parallel_size
        self.workers = []
        # before_forward(worker, so) runs on each worker after its connector's handle_preemptions and bind, before
        # the step's loads and forward: where vLLM may overwrite a block it re-allocated (shared by the workers).
        self.before_forward: list[Callable] = []
        for rank in range(tp):
            worker_connector = None
            if connector_factory is not None:
                worker_connector = connector_factory(self._rank_config(rank, worker=True), KVConnectorRole.WORKER,
                                                     self.preset.kv_cache_config(self.config.num_blocks, tp))
            self.workers.append(Worker(self.kv_cache_config, rank=rank, tp_size=tp, content_salt=self.content_salt,
                                       vocab_size=self.preset.vocab_size, connector=worker_connector,
                                       kernel_block_ratio=self.config.kernel_block_ratio,
                                       before_forward=self.before_forward))
        self.aggregator = KVOutputAggregator(tp)
        self.step_count = 0
        # Async scheduling: steps executed whose output the scheduler has not applied yet, oldest last (vLLM's
        # batch queue), each (so, kv_output, sampled).
        self.batch_queue: list[tuple] = []
        # observer(so) runs after the workers executed a step and before the scheduler applies it: tables
        # still hold every block the step used (test instrumentation that every step gets).
        self.observers: list[Callable[[SchedulerOutput], None]] = []
        # pre_execute(so) runs after schedule and before the workers (and before `before_execute`): a test
        # can act as another owner of blocks the schedule just freed.
        self.pre_execute: list[Callable[[SchedulerOutput], None]] = []
        # after_step(so, kv_output) runs at the end of every step, once the scheduler applied it (kv_output: the
        # workers' aggregated connector output, None without a connector): a driver's progress watchdog.
        self.after_step: list[Callable[[SchedulerOutput, Any], None]] = []

    def _rank_config(self, rank: int, worker: bool = False) -> EngineConfig:
        config = copy.copy(self.config)
        config.parallel_config = ParallelConfig(self.config.parallel_config.tensor_parallel_size, rank)
        if worker and self.config.worker_model is not None:
            config.model_config = ModelConfig(self.config.worker_model)
        return config

    @contextlib.contextmanager
    def connector_detached(self):
        """Run requests the connectors never see (their KV enters only the local prefix cache), as when a
        connector is attached to an engine that already served traffic. Only between requests."""
        if self.scheduler.has_unfinished_requests():
            raise RuntimeError("connector_detached: requests are in flight")
        saved = (self.scheduler.connector, [w.connector for w in self.workers])
        self.scheduler.connector = None
        for worker in self.workers:
            worker.connector = None
        try:
            yield self
        finally:
            self.scheduler.connector = saved[0]
            for worker, connector in zip(self.workers, saved[1]):
                worker.connector = connector

    @property
    def connector(self):
        """The scheduler-role connector (or None)."""
        return self.scheduler.connector

    def make_request(self, prompt_token_ids, *, request_id: str | None = None, max_tokens: int = 1,
                     **kwargs) -> EngineRequest:
        """A request whose prefix hashes match this engine's allocator."""
        return EngineRequest(request_id or uuid.uuid4().hex[:12], prompt_token_ids, max_tokens=max_tokens,
                             block_hasher=self._block_hasher, **kwargs)

    def add_request(self, request: EngineRequest) -> EngineRequest:
        """Queue a request."""
        self.scheduler.add_request(request)
        return request

    def abort_request(self, request_id: str) -> None:
        """Abort a request."""
        self.scheduler.abort_request(request_id)

    def step(self, before_execute: Callable | None = None, after_execute: Callable | None = None) -> SchedulerOutput:
        """One engine step (idle steps included: the connector cycle always runs).

        `before_execute(so)` runs between schedule and the workers, `after_execute(so, kv_output)` after
        the workers and before the scheduler applies the results (test instrumentation).
        """
        so = self.scheduler.schedule()
        kv_output, sampled = self.execute(so, so, before_execute, after_execute)
        kv_output = kv_output if self.scheduler.connector is not None else None
        for applied, (applied_kv, applied_sampled) in self.in_flight_order(so, (kv_output, sampled)):
            self.scheduler.update_from_output(applied, applied_sampled, applied_kv)
            for hook in self.after_step:
                hook(applied, applied_kv)
        self.step_count += 1
        return so

    BATCH_QUEUE_SIZE = 2  # vLLM's max_concurrent_batches with async scheduling (no pipeline parallelism)

    def in_flight_order(self, so, result) -> list[tuple]:
        """The steps whose output the scheduler applies now, after `so` was scheduled and executed with `result`:
        `so` itself without async scheduling; with it, vLLM's `step_with_batch_queue` order: a step that ran the
        model stays in flight until the next step is scheduled (the queue of two is full), and then the oldest
        step's output is applied; a step that ran nothing is applied at once, behind the one in flight."""
        if not self.config.async_scheduling:
            return [(so, result)]
        self.batch_queue.insert(0, (so, result))
        if len(self.batch_queue) < self.BATCH_QUEUE_SIZE and so.total_num_scheduled_tokens:
            return []
        if so.total_num_scheduled_tokens:
            return [self.batch_queue.pop()]
        applied, self.batch_queue = list(reversed(self.batch_queue)), []
        return applied

    @property
    def has_steps_in_flight(self) -> bool:
        """Whether a step was executed and its output not yet applied (async scheduling)."""
        return bool(self.batch_queue)

    def execute(self, so, worker_so, before_execute: Callable | None = None,
                after_execute: Callable | None = None) -> tuple[Any, dict[str, int]]:
        """The part of a step between schedule and update: the `pre_execute` and `before_execute` hooks, every
        worker executing `worker_so` (the schedule `so` as the workers read it), their connector outputs
        aggregated, the observers and `after_execute`, and each sampled token handed to every worker.
        Returns (the aggregated connector output, sampled token per request)."""
        for hook in self.pre_execute:
            hook(so)
        if before_execute is not None:
            before_execute(so)
        marks = [len(w.read_errors) for w in self.workers]
        outputs = [w.execute_model(worker_so) for w in self.workers]
        kv_output = self.aggregator.aggregate([o.kv_connector_output for o in outputs])
        if kv_output.failed_recving:
            # A failed sync load's step is discarded and recomputed: its reads are not model output.
            for w, mark in zip(self.workers, marks):
                w.read_errors[mark:] = [e for e in w.read_errors[mark:] if e.req_id not in kv_output.failed_recving]
        for observer in self.observers:
            observer(so)
        if after_execute is not None:
            after_execute(so, kv_output)
        sampled = outputs[0].sampled_token_ids
        for req_id, token in sampled.items():
            for w in self.workers:
                if self.scheduler.requests[req_id].num_computed_tokens >= self.scheduler.requests[req_id].num_tokens:
                    w.append_token(req_id, token)
        return kv_output, sampled

    def run_until_done(self, max_steps: int = MAX_STEPS, idle_steps: int = 2, min_seconds: float = 0.0,
                       **hooks) -> int:
        """Step until no request is unfinished, then `idle_steps` idle steps; returns steps taken. The run is
        stuck once it took `max_steps` steps and `min_seconds` of wall time: a connector whose transfers finish
        on a server's clock (LMCache's) gets the time a real engine's slower steps would give it."""
        start, started = self.step_count, time.monotonic()
        while self.scheduler.has_unfinished_requests() or self.has_steps_in_flight:
            if self.step_count - start >= max_steps and time.monotonic() - started >= min_seconds:
                raise RuntimeError(f"engine did not finish within {max_steps} steps"
                                   + (f" and {min_seconds:g} s" if min_seconds else ""))
            self.step(**hooks)
        for _ in range(idle_steps):
            self.step(**hooks)
        return self.step_count - start

    @property
    def read_errors(self):
        """Every wrong value any worker's forward read."""
        return [e for w in self.workers for e in w.read_errors]
