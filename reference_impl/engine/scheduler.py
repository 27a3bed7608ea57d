"""The scheduler: waiting/running queues over `KVCacheManager`, calling the scheduler-side connector
hooks in vLLM 0.33's order (connector.md section 1.6).

Deviation from vLLM, on purpose: blocks filled by an external load are registered in the prefix cache
only after the step confirms the load (`delay_cache_blocks=True` for sync loads too), so a failed load
never publishes unwritten blocks; vLLM registers them at schedule time and repairs with invalid-block
handling. A failed sync load may therefore be reported in `failed_recving` (with its `finished_recving`).

What vLLM 0.33's scheduler asserts about the completions a connector reports, this one raises as
`ConnectorReportError`: a finished load for an id it does not hold, or for a request that is neither waiting
for a load nor finished with its blocks held for one; a finished send for a request that holds no delayed
blocks. As in vLLM, aborting a request whose asynchronous load is in flight keeps its blocks until the load
is reported finished. `transfers` counts every load and delayed free started and completed, per request.

With `async_scheduling` (vLLM's AsyncScheduler with a consumer connector, 0.33's `defer_block_free`), the engine
schedules step N+1 before it applies step N's output: a request's tokens count as in flight from its schedule
to its update (the sliding window prunes behind what was processed, not what was scheduled), and the blocks of a
request freed while a step that scheduled it is still in flight return to the pool only once that step's output
is applied (`deferred_frees`): a connector's load into a re-allocated block is not ordered with the in-flight
step's writes.
"""

from __future__ import annotations

from collections import Counter, deque

from reference_impl.connector.base import KVConnectorOutput, supports_hma
from reference_impl.engine.aggregator import ConnectorReportError
from reference_impl.engine.outputs import NewRequestData, SchedulerOutput
from reference_impl.engine.request import EngineRequest, EngineRequestStatus
from reference_impl.kv_cache.kv_cache_manager import KVCacheManager
from reference_impl.kv_cache.request import RequestStatus
from reference_impl.kv_cache.kv_cache_interface import AttentionSpec, MambaSpec, cdiv


class Scheduler:
    """Schedules requests step by step; `connector` is the scheduler-role connector or None."""

    def __init__(self, kv_cache_manager: KVCacheManager, connector=None, *, max_num_batched_tokens: int = 2048,
                 max_num_seqs: int = 16, async_scheduling: bool = False):
        self.kv_cache_manager = kv_cache_manager
        self.connector = connector
        self.connector_is_hma = connector is not None and supports_hma(type(connector))
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_seqs = max_num_seqs
        self.requests: dict[str, EngineRequest] = {}
        self.waiting: deque[EngineRequest] = deque()
        self.running: list[EngineRequest] = []
        self.finished_req_ids: set[str] = set()
        self.finished_recving: set[str] = set()
        self.failed_recving: set[str] = set()
        self.delayed_free: dict[str, EngineRequest] = {}
        self.pending_cache: dict[str, int] = {}  # req -> tokens to cache after a confirmed sync load
        self.finished_outputs: dict[str, list[int]] = {}
        self.connector_events: list = []
        # (kind, req_id) -> count, kind in recv_started / recv_finished / send_started / send_finished
        self.transfers: Counter[tuple[str, str]] = Counter()
        groups = kv_cache_manager.kv_cache_config.kv_cache_groups
        self.specs = [g.kv_cache_spec for g in groups]
        self.mamba_block_size = next((s.block_size for s in self.specs if isinstance(s, MambaSpec)), None)
        self.async_scheduling = async_scheduling
        # Non-empty steps scheduled and applied; a request's last scheduled step (`last_sched_seq`) fences its free.
        self.sched_step_seq = 0
        self.processed_step_seq = 0
        self.deferred_frees: deque[tuple[int, list]] = deque()  # (fence step, blocks), returned once it is applied
        if connector is not None and hasattr(connector, "bind_kv_cache_manager"):
            connector.bind_kv_cache_manager(kv_cache_manager)

    # ---- requests ---------------------------------------------------------------------------------
    def add_request(self, request: EngineRequest) -> None:
        """Queue a new request."""
        if request.request_id in self.requests:
            raise ValueError(f"request_id {request.request_id!r} is already in the scheduler")
        self.requests[request.request_id] = request
        self.waiting.append(request)
        if self.connector is not None and hasattr(self.connector, "on_new_request"):
            self.connector.on_new_request(request)

    def abort_request(self, request_id: str) -> None:
        """Abort a request in any state (outside a step, as vLLM's `finish_requests`)."""
        request = self.requests.get(request_id)
        if request is None or request.is_finished:
            return
        if request in self.running:
            self.running.remove(request)
        if request in self.waiting:
            self.waiting.remove(request)
        # vLLM: a load in flight will still write the request's blocks, so they wait for its completion.
        loading = request.engine_status == EngineRequestStatus.WAITING_FOR_REMOTE_KVS \
            and request_id not in self.finished_recving
        request.engine_status = EngineRequestStatus.FINISHED_ABORTED
        self._free_request(request, force_delay=loading)

    def has_unfinished_requests(self) -> bool:
        """True while anything waits, runs, or holds delayed blocks."""
        return bool(self.waiting or self.running or self.delayed_free)

    # ---- schedule ---------------------------------------------------------------------------------
    def _mamba_split(self, request: EngineRequest, start: int, num_new: int) -> int:
        # Mamba "align": a prefill step ends at the next Mamba block boundary, so the state of every
        # boundary exists (is cached, and can be stored by a connector).
        bs = self.mamba_block_size
        if bs is None:
            return num_new
        boundary = (start // bs + 1) * bs
        if boundary < request.num_prompt_tokens and start + num_new > boundary:
            return boundary - start
        return num_new

    def schedule(self) -> SchedulerOutput:
        """Build one step's `SchedulerOutput` (and the connector metadata)."""
        manager = self.kv_cache_manager
        manager.new_step_starts()
        out = SchedulerOutput(finished_req_ids=set(self.finished_req_ids))
        self.finished_req_ids.clear()
        budget = self.max_num_batched_tokens
        cached = out.scheduled_cached_reqs
        scheduled_running: list[EngineRequest] = []

        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            num_new = self._mamba_split(request, request.num_computed_tokens, num_new)
            if num_new <= 0:
                index += 1
                continue
            new_blocks = manager.allocate_slots(request, num_new)
            if new_blocks is None:
                victim = self.running.pop()
                self._preempt(victim, out)
                if victim is request:
                    break
                continue
            cached.req_ids.append(request.request_id)
            cached.new_block_ids.append(new_blocks.get_block_ids(allow_none=True))
            cached.num_computed_tokens.append(request.num_computed_tokens)
            cached.new_token_ids.append([])
            cached.num_output_tokens.append(len(request.output_token_ids))
            out.num_scheduled_tokens[request.request_id] = num_new
            budget -= num_new
            scheduled_running.append(request)
            index += 1

        skipped: list[EngineRequest] = []
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting.popleft()
            if request.engine_status == EngineRequestStatus.WAITING_FOR_REMOTE_KVS:
                if not self._update_waiting_for_remote_kv(request):
                    skipped.append(request)
                    continue
            resumed = request.engine_status == EngineRequestStatus.PREEMPTED
            load_async = False
            num_external = 0
            if request.num_computed_tokens == 0:
                hit_blocks, num_local, _ = manager.get_computed_blocks(request)
                if self.connector is not None:
                    num_external, load_async = self.connector.get_num_new_matched_tokens(request, num_local)
                    if num_external is None:
                        skipped.append(request)
                        continue
                    num_external = int(num_external)
            else:
                hit_blocks, num_local = None, 0
            computed_before = request.num_computed_tokens + num_local + num_external
            num_new = 0 if load_async else min(request.num_tokens - computed_before, budget)
            if not load_async:
                num_new = self._mamba_split(request, computed_before, num_new)
            if num_new <= 0 and not load_async and computed_before >= request.num_tokens:
                num_new = 1  # nothing left to compute: recompute the last token
            new_blocks = manager.allocate_slots(
                request, num_new, num_local, hit_blocks, num_external_computed_tokens=num_external,
                delay_cache_blocks=num_external > 0,
            )
            if new_blocks is None:
                skipped.append(request)
                break
            if self.connector is not None:
                if num_external and load_async and hasattr(self.connector, "get_loaded_kv_cache_group_ids"):
                    self.connector.get_loaded_kv_cache_group_ids(request)
                self.connector.update_state_after_alloc(request, manager.get_blocks(request.request_id), num_external)
            if request.num_computed_tokens == 0:  # a fresh admission (not the re-admission after a load)
                request.num_local_computed_tokens = num_local
                request.num_external_computed_tokens = num_external
            request.num_computed_tokens = computed_before
            if load_async:
                request.engine_status = EngineRequestStatus.WAITING_FOR_REMOTE_KVS
                self.transfers[("recv_started", request.request_id)] += 1
                skipped.append(request)
                continue
            if num_external:
                out.has_sync_kv_loads = True
                self.pending_cache[request.request_id] = computed_before
            request.engine_status = EngineRequestStatus.RUNNING
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            table = manager.get_block_ids(request.request_id)
            if resumed:
                cached.req_ids.append(request.request_id)
                cached.resumed_req_ids.add(request.request_id)
                cached.new_block_ids.append(table)
                cached.num_computed_tokens.append(request.num_computed_tokens)
                cached.new_token_ids.append([])
                cached.all_token_ids[request.request_id] = list(request.all_token_ids)
                cached.num_output_tokens.append(len(request.output_token_ids))
            else:
                out.scheduled_new_reqs.append(NewRequestData(
                    req_id=request.request_id, prompt_token_ids=list(request.prompt_token_ids), block_ids=table,
                    num_computed_tokens=request.num_computed_tokens, lora_request=request.lora_request,
                    cache_salt=request.cache_salt,
                ))
            out.num_scheduled_tokens[request.request_id] = num_new
            budget -= num_new
        self.waiting.extendleft(reversed(skipped))

        out.total_num_scheduled_tokens = sum(out.num_scheduled_tokens.values())
        # As vLLM's scheduler: drained every step (the manager keeps recording otherwise).
        out.new_block_ids_to_zero = self.kv_cache_manager.take_new_block_ids()
        if self.connector is not None:
            out.kv_connector_metadata = self.connector.build_connector_meta(out)
        if out.total_num_scheduled_tokens:
            self.sched_step_seq += 1
        for req_id, num in out.num_scheduled_tokens.items():
            request = self.requests[req_id]
            request.num_computed_tokens += num
            if self.async_scheduling:
                request.num_in_flight_tokens += num
                request.last_sched_seq = self.sched_step_seq
        return out

    def _update_waiting_for_remote_kv(self, request: EngineRequest) -> bool:
        req_id = request.request_id
        if req_id not in self.finished_recving:
            return False
        self.finished_recving.discard(req_id)
        if req_id in self.failed_recving:
            # vLLM 0.33 (`_handle_failed_recving`, `_handle_blocked_waiting_request`): the request starts again from
            # no computed token, promoted to WAITING (PREEMPTED only if it was preempted before): it was never
            # scheduled, so it is admitted as a new request after a new lookup, not resumed as a preempted one
            # (LMCache's MP connector bypasses itself on that lookup; a resumed request resets its state instead).
            # Unlike vLLM, which keeps the request's blocks for it, they are freed and allocated again.
            self.failed_recving.discard(req_id)
            self._restart(request, ran=False)
            return True
        else:
            self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)
        if request.num_computed_tokens >= request.num_tokens:
            request.num_computed_tokens = request.num_tokens - 1  # recompute the last token for its logits
        request.engine_status = EngineRequestStatus.WAITING
        return True

    def _restart(self, request: EngineRequest, ran: bool = True) -> None:
        """Drop the request's blocks and compute it again from no computed token (vLLM's recompute policy):
        on preemption, after a failed sync load, after a failed async load.

        A request that `ran` (preempted, or its sync load failed in the step it ran in) counts one more
        preemption and is re-admitted like a preempted request: workers and connectors get a replaced table.
        One that never ran (its async load failed) is WAITING again, PREEMPTED only if it was preempted before.
        """
        self._free_blocks(request)
        # A sync load of a step still in flight (async scheduling) is not confirmed into the prefix cache: the
        # request's blocks are gone.
        self.pending_cache.pop(request.request_id, None)
        request.num_computed_tokens = 0
        if ran:
            request.num_preemptions += 1
        if request.num_preemptions:
            request.engine_status, request.status = EngineRequestStatus.PREEMPTED, RequestStatus.PREEMPTED
        else:
            request.engine_status, request.status = EngineRequestStatus.WAITING, RequestStatus.WAITING

    def _preempt(self, request: EngineRequest, out: SchedulerOutput) -> None:
        self._restart(request)
        out.preempted_req_ids.add(request.request_id)
        out.num_scheduled_tokens.pop(request.request_id, None)
        self.waiting.appendleft(request)

    # ---- update_from_output -----------------------------------------------------------------------
    def update_from_output(self, scheduler_output: SchedulerOutput, sampled: dict[str, int],
                           kv_output: KVConnectorOutput | None) -> None:
        """Apply a step's results in vLLM's order: failures, outputs and finishes, connector output, events."""
        kv_output = kv_output or KVConnectorOutput()
        if scheduler_output.total_num_scheduled_tokens:
            self.processed_step_seq += 1
            self._drain_deferred_frees()
        if self.async_scheduling:
            for req_id, num in scheduler_output.num_scheduled_tokens.items():
                request = self.requests.get(req_id)
                if request is not None:
                    request.num_in_flight_tokens = max(0, request.num_in_flight_tokens - num)
        sync_loading = set(self.pending_cache) & set(scheduler_output.num_scheduled_tokens)
        if kv_output.invalid_block_ids and len(self.specs) > 1:
            raise RuntimeError(
                "connector reported invalid_block_ids "
                f"{sorted(kv_output.invalid_block_ids)} on a model with {len(self.specs)} KV cache groups; "
                "block ids are only unique within a group: report failed loads per request (failed_recving)"
            )
        failed = set(kv_output.failed_recving or ()) | self._requests_of_blocks(kv_output.invalid_block_ids)
        for req_id, num in scheduler_output.num_scheduled_tokens.items():
            request = self.requests[req_id]
            if request.is_finished:
                continue
            if req_id in self.pending_cache:
                cache_upto = self.pending_cache.pop(req_id)
                if req_id in failed:
                    # A sync load failed: the step's output is garbage; recompute the request.
                    self.running.remove(request)
                    self._restart(request)
                    self.waiting.appendleft(request)
                    continue
                self.kv_cache_manager.cache_blocks(request, cache_upto)
            if request.num_computed_tokens >= request.num_tokens and req_id in sampled:
                request.append_output_token_ids(sampled[req_id])
                if len(request.output_token_ids) >= request.max_tokens or sampled[req_id] in request.stop_token_ids:
                    request.engine_status = EngineRequestStatus.FINISHED_STOPPED
                    self.running.remove(request)
                    self._free_request(request)
        if self.connector is not None:
            self.connector.update_connector_output(kv_output)
            self.connector_events.extend(self.connector.take_events() or ())
        for req_id in kv_output.finished_recving or ():
            request = self._reported(req_id, "finished_recving")
            if request.is_finished:
                self._release_delayed(request)
                continue
            failed_sync = req_id in (kv_output.failed_recving or ()) and req_id in sync_loading
            if request.engine_status != EngineRequestStatus.WAITING_FOR_REMOTE_KVS and not failed_sync:
                raise ConnectorReportError(
                    f"finished_recving reported {req_id}, which is not waiting for a load (it is "
                    f"{request.engine_status.name}; vLLM's scheduler asserts a finished load is for a request in "
                    "WAITING_FOR_REMOTE_KVS or a finished one whose blocks wait for it)")
            if not failed_sync:  # (a failed sync load is restarted above: no load was waited for)
                self.transfers[("recv_finished", req_id)] += 1
                self.finished_recving.add(req_id)
        for req_id in kv_output.failed_recving or ():
            if self.requests.get(req_id) is not None and \
                    self.requests[req_id].engine_status == EngineRequestStatus.WAITING_FOR_REMOTE_KVS:
                self.failed_recving.add(req_id)
        for req_id in kv_output.finished_sending or ():
            request = self._reported(req_id, "finished_sending")
            if not request.is_finished:
                raise ConnectorReportError(
                    f"finished_sending reported {req_id}, which is still {request.engine_status.name} (vLLM's "
                    "scheduler frees the blocks of a finished send, and asserts the request finished)")
            self._release_delayed(request, "send_finished")

    def _reported(self, req_id: str, kind: str) -> EngineRequest:
        """The request a completion names; ConnectorReportError when vLLM's scheduler no longer holds it (an
        unknown id, or a finished request whose blocks were already freed)."""
        request = self.requests.get(req_id)
        if request is None or (request.is_finished and req_id not in self.delayed_free):
            state = "is unknown" if request is None else "finished and its blocks were already freed"
            raise ConnectorReportError(
                f"{kind} reported {req_id}, which {state} (vLLM's scheduler asserts the id is a request it holds: "
                "each load or delayed free is reported finished exactly once)")
        return request

    def _release_delayed(self, request: EngineRequest, kind: str = "recv_finished") -> None:
        """A finished request's delayed blocks go back to the pool (its send or in-flight load completed)."""
        self.delayed_free.pop(request.request_id, None)
        self.transfers[(kind, request.request_id)] += 1
        if self.kv_cache_manager.coordinator.has_request(request.request_id):
            self._free_blocks(request)

    def _free_blocks(self, request: EngineRequest) -> None:
        """Free the request's blocks; under async scheduling, while a step that scheduled the request is still in
        flight, they wait in `deferred_frees` for that step's output (vLLM 0.33's `_free_request_blocks`)."""
        if not self.async_scheduling or getattr(request, "last_sched_seq", 0) <= self.processed_step_seq:
            self.kv_cache_manager.free(request)
            return
        blocks = self.kv_cache_manager.pop_blocks_for_free(request)
        if blocks:
            self.deferred_frees.append((request.last_sched_seq, blocks))

    def _drain_deferred_frees(self) -> None:
        """Return the deferred blocks whose fence step's output is applied (tail blocks first)."""
        while self.deferred_frees and self.deferred_frees[0][0] <= self.processed_step_seq:
            _, blocks = self.deferred_frees.popleft()
            self.kv_cache_manager.block_pool.free_blocks(reversed(blocks))

    def _requests_of_blocks(self, block_ids) -> set[str]:
        if not block_ids:
            return set()
        owners = set()
        for request in self.running:
            table = self.kv_cache_manager.get_block_ids(request.request_id)
            if any(b in block_ids for b in table[0]):
                owners.add(request.request_id)
        return owners

    def finish_block_ids(self, request: EngineRequest) -> tuple[list[int], ...]:
        """The table `request_finished_all_groups` sees: out-of-window blocks nulled, attention clipped."""
        manager = self.kv_cache_manager
        # On the processed-token basis (vLLM 0.34's `_connector_finished`): a step in flight still reads the window.
        manager.remove_skipped_blocks(request.request_id,
                                      max(0, request.num_computed_tokens - request.num_in_flight_tokens))
        table = manager.get_block_ids(request.request_id)
        return tuple(
            ids[: cdiv(request.num_computed_tokens, spec.block_size)] if isinstance(spec, AttentionSpec) else ids
            for ids, spec in zip(table, self.specs)
        )

    def _free_request(self, request: EngineRequest, force_delay: bool = False) -> None:
        req_id = request.request_id
        self.finished_outputs[req_id] = list(request.output_token_ids)
        self.pending_cache.pop(req_id, None)
        self.finished_recving.discard(req_id)
        self.failed_recving.discard(req_id)
        has_blocks = self.kv_cache_manager.coordinator.has_request(req_id)
        delay, params = False, None
        if self.connector is not None:
            block_ids = self.finish_block_ids(request) if has_blocks else tuple([] for _ in self.specs)
            if self.connector_is_hma:
                delay, params = self.connector.request_finished_all_groups(request, block_ids)
            else:
                if len(block_ids) != 1:
                    raise RuntimeError("request_finished (non-HMA) needs exactly one KV cache group")
                delay, params = self.connector.request_finished(request, block_ids[0])
        request.kv_transfer_params = params
        self.finished_req_ids.add(req_id)
        if delay:
            self.transfers[("send_started", req_id)] += 1
        # vLLM keeps a request whose finish the connector delayed until its finished_sending, blocks or not
        # (a request aborted while waiting has none): the report then names a request the scheduler holds.
        if delay or (force_delay and has_blocks):
            self.delayed_free[req_id] = request
        elif has_blocks:
            self._free_blocks(request)

