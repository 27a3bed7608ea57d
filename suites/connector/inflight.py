"""Oracles of async scheduling (checks C42 and C43): what an engine that schedules step N+1 before it applies step
N's output must never do with the blocks of a step still in flight or of a load still running.

`InFlightWatch` attaches to one engine (kvconform's `EngineCore` or, with `--kv-engine vllm`, vLLM's scheduler
behind the same surface) and watches the block pool's allocations (`BlockPool.get_new_blocks`, the one way a
block gets a new owner) and each step's list of blocks the workers zero (`new_block_ids_to_zero`):

* in flight: from its schedule (the `pre_execute` hooks) to the moment the scheduler applied its output (the
  `after_step` hooks), a step references, for each request it scheduled, the blocks its forward reads and
  writes: every block of a full-attention or state group's table, and of a sliding-window group the blocks
  from `sliding_window - 1` tokens before the step's first token. None of them may be allocated anew while the
  step is in flight (C42): a connector's load into a re-allocated block is not ordered with that step's writes.
* loading: a load runs from the step whose schedule started it (`update_state_after_alloc` with external
  tokens) until the scheduler applied its end: the step's output for a synchronous load, the
  `finished_recving` (or `failed_recving`) of the request for an asynchronous one. Until then none of the
  request's blocks may be allocated anew, nor listed for zeroing by a later step (C43).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reference_impl.kv_cache.kv_cache_interface import (AttentionSpec, ChunkedLocalAttentionSpec, ScratchSpec,
                                                       SlidingWindowSpec, cdiv)

LOADING = "WAITING_FOR_REMOTE_KVS"


def status_name(request) -> str:
    """The request's scheduling state's name on either engine (kvconform's `engine_status`, vLLM's `status`)."""
    status = getattr(request, "engine_status", None) or request.status
    return getattr(status, "name", str(status))


@dataclass
class _Load:
    """One load in flight: its request, the blocks it may write, the step that started it, sync or async."""

    req_id: str
    blocks: frozenset[int]
    step: int
    is_async: bool


@dataclass
class _Step:
    """One step in flight: its number and block -> (request, group) of every block it references."""

    number: int
    refs: dict[int, tuple[str, int]] = field(default_factory=dict)


class InFlightWatch:
    """The C42 / C43 oracles on `engine` (see the module docstring). `violations` lists what broke them, each one
    line; `allocations_in_flight` counts blocks allocated while a step was in flight, `loads_seen` the loads
    watched, `async_loads_seen` those asynchronous (a scenario that made none decided nothing)."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.violations: list[str] = []
        self.allocations_in_flight = 0
        self.loads_seen = 0
        self.async_loads_seen = 0
        self.max_in_flight = 0
        self._steps: dict[int, _Step] = {}  # id(so) -> the step, while in flight
        self._loads: dict[str, _Load] = {}
        self._schedules = 0
        self._calls_seen = 0
        self._fresh: list[tuple[int, int]] = []  # (block, schedule number) allocated since the last schedule ended
        pool = engine.scheduler.kv_cache_manager.block_pool
        allocate = pool.get_new_blocks

        def get_new_blocks(num_blocks, *args, **kwargs):
            blocks = allocate(num_blocks, *args, **kwargs)
            self._allocated(blocks)
            return blocks

        pool.get_new_blocks = get_new_blocks  # an instance attribute: the managers call the pool's method by name
        engine.pre_execute.append(self._scheduled)
        engine.after_step.append(self._applied)

    # ---- allocations -------------------------------------------------------------------------------------
    def _allocated(self, blocks) -> None:
        schedule = self._schedules + 1  # the schedule running now (its number once it ends)
        for block in blocks:
            block_id = block.block_id
            if self._steps:
                self.allocations_in_flight += 1
            for step in self._steps.values():
                if block_id in step.refs:
                    req_id, group = step.refs[block_id]
                    self.violations.append(
                        f"C42: block {block_id} (group {group}) of request {req_id}, referenced by step {step.number} "
                        f"still in flight, was allocated anew by step {schedule}'s schedule before step "
                        f"{step.number}'s output was applied")
            for load in self._loads.values():
                if block_id in load.blocks:
                    kind = "asynchronous" if load.is_async else "synchronous"
                    self.violations.append(
                        f"C43: block {block_id} of request {load.req_id}, which its {kind} load started in step "
                        f"{load.step} is writing, was allocated anew by step {schedule}'s schedule before the load "
                        "was reported finished")

    # ---- hooks ----------------------------------------------------------------------------------------------
    def _scheduled(self, so) -> None:
        """After a schedule: zeroing of blocks in load, the loads this schedule started, the step's references."""
        self._schedules += 1
        number = self._schedules
        zeroed = set(getattr(so, "new_block_ids_to_zero", None) or ())
        for load in self._loads.values():
            hit = sorted(zeroed & load.blocks)
            if hit:
                self.violations.append(
                    f"C43: blocks {hit[:8]} of request {load.req_id}, which its "
                    f"{'asynchronous' if load.is_async else 'synchronous'} load started in step {load.step} is "
                    f"writing, are listed for zeroing by step {number} (new_block_ids_to_zero) before the load "
                    "was reported finished")
        self._start_loads(number)
        step = _Step(number)
        manager = self.engine.manager
        groups = self.engine.kv_cache_config.kv_cache_groups
        requests = self.engine.scheduler.requests
        for req_id, num in so.num_scheduled_tokens.items():
            request = requests.get(req_id)
            if request is None:
                continue
            end = request.num_computed_tokens
            start = max(0, end - num)
            for group, ids in enumerate(manager.get_block_ids(req_id)):
                spec = groups[group].kv_cache_spec
                first, last = 0, len(ids)  # a state group's step reads and writes its whole table
                if isinstance(spec, AttentionSpec) and not isinstance(spec, ScratchSpec):
                    if isinstance(spec, SlidingWindowSpec):
                        first = max(0, start - spec.sliding_window + 1) // spec.block_size
                    elif isinstance(spec, ChunkedLocalAttentionSpec):
                        first = start // spec.attention_chunk_size * spec.attention_chunk_size // spec.block_size
                    last = cdiv(end, spec.block_size)
                for block_id in ids[first:max(first, last)]:
                    if block_id:
                        step.refs[block_id] = (req_id, group)
        if so.total_num_scheduled_tokens:
            self._steps[id(so)] = step
            self.max_in_flight = max(self.max_in_flight, len(self._steps))

    def _start_loads(self, number: int) -> None:
        """The loads this schedule started: `update_state_after_alloc` calls with external tokens since the last."""
        connector = self.engine.connector
        calls = getattr(connector, "calls", None)
        if calls is None:
            return
        requests = self.engine.scheduler.requests
        for call in calls[self._calls_seen:]:
            if call[1] != "update_state_after_alloc" or len(call[2]) < 3 or not call[2][2]:
                continue
            request = call[2][0]
            if requests.get(request.request_id) is not request:
                continue  # another engine's request (the check's engines share one call log)
            ids = self.engine.manager.get_block_ids(request.request_id)
            blocks = frozenset(b for group in ids for b in group if b)
            is_async = status_name(request) == LOADING
            self._loads[request.request_id] = _Load(request.request_id, blocks, number, is_async)
            self.loads_seen += 1
            self.async_loads_seen += is_async
        self._calls_seen = len(calls)

    def _applied(self, so, kv_output) -> None:
        """After the scheduler applied `so`'s output: the step is no longer in flight, loads it ended are over."""
        step = self._steps.pop(id(so), None)
        number = step.number if step is not None else None
        done = set(getattr(kv_output, "finished_recving", None) or ()) | \
            set(getattr(kv_output, "failed_recving", None) or ())
        for req_id, load in list(self._loads.items()):
            if (load.is_async and req_id in done) or (not load.is_async and load.step == number):
                del self._loads[req_id]

    def evidence(self, check_id: str) -> str | None:
        """The first violation of `check_id`'s oracle and how many there were, or None (a check judges its own
        oracle: C43's scenario also keeps steps in flight, and a reuse of their blocks is C42's verdict)."""
        mine = [v for v in self.violations if v.startswith(f"{check_id}: ")]
        if not mine:
            return None
        more = f" (and {len(mine) - 1} more)" if len(mine) > 1 else ""
        return mine[0] + more
