"""The async-scheduling oracles can fail: C42 in-flight-blocks-kept and C43 loading-blocks-kept, run on kvconform's
engine with a deliberately broken scheduler (each one mistake an engine with two steps in flight can make), catch
the mistake with their own evidence, while the same checks pass on the correct engine (the suite's own run).

The mistakes are the classes of real vLLM bugs: blocks of a request finished, aborted or preempted while a step that
scheduled it is in flight returned to the pool at once (vLLM before `defer_block_free`, vllm-project/vllm#45357);
sliding-window blocks pruned on the scheduled rather than the processed token count at a finish; the blocks of an
aborted request whose asynchronous load is running freed at once (vllm-project/vllm#32255); blocks a load is writing
listed for zeroing again by a later step."""

from __future__ import annotations

import pytest

from harness.targets.connector.selection import connector_target
from reference_impl.engine.core import EngineCore
from reference_impl.engine.request import EngineRequestStatus
from reference_impl.engine.scheduler import Scheduler
from suites.connector.context import CheckContext
from suites.connector import test_async_scheduling as checks


class NoFenceScheduler(Scheduler):
    """Frees a request's blocks at once, even while a step that scheduled it is in flight."""

    def _free_blocks(self, request) -> None:
        self.kv_cache_manager.free(request)


class ScheduledWindowFinishScheduler(Scheduler):
    """At a finish, prunes the sliding window on the scheduled token count (a step in flight still reads it)."""

    def finish_block_ids(self, request):
        in_flight, request.num_in_flight_tokens = request.num_in_flight_tokens, 0
        try:
            return super().finish_block_ids(request)
        finally:
            request.num_in_flight_tokens = in_flight


class AbortFreesLoadScheduler(Scheduler):
    """Aborting a request whose asynchronous load runs frees its blocks at once (the load's later report is then
    ignored, as for an unknown request)."""

    def _free_request(self, request, force_delay: bool = False) -> None:
        super()._free_request(request, force_delay=False)

    def _reported(self, req_id, kind):
        request = self.requests.get(req_id)
        if request is not None and request.is_finished and req_id not in self.delayed_free:
            return request
        return super()._reported(req_id, kind)


class RezeroLoadingScheduler(Scheduler):
    """Lists the blocks of every request waiting for its load for zeroing again, every step."""

    def schedule(self):
        out = super().schedule()
        manager = self.kv_cache_manager
        for request in self.waiting:
            if request.engine_status == EngineRequestStatus.WAITING_FOR_REMOTE_KVS and \
                    manager.coordinator.has_request(request.request_id):
                out.new_block_ids_to_zero += [b for ids in manager.get_block_ids(request.request_id) for b in ids if b]
        return out


def _context(scheduler_cls: type, preset: str, check_id: str) -> CheckContext:
    """The check's context for the built-in LMCache-like connector, on kvconform's engine with `scheduler_cls`."""

    class MutantEngine(EngineCore):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.scheduler.__class__ = scheduler_cls

    class MutantContext(CheckContext):
        engine_class = MutantEngine

    return MutantContext(connector_target("LMCacheLikeConnector"), preset, check_id=check_id)


CHECKS = {"C42": checks.test_c42_in_flight_blocks_kept, "C43": checks.test_c43_loading_blocks_kept}
MUTANTS = [
    (NoFenceScheduler, "C42", "fa_only"),
    (ScheduledWindowFinishScheduler, "C42", "fa+swa"),
    (AbortFreesLoadScheduler, "C43", "fa_only"),
    (RezeroLoadingScheduler, "C43", "fa+swa"),
]


@pytest.mark.parametrize("scheduler_cls, check_id, preset", MUTANTS, ids=[m[0].__name__ for m in MUTANTS])
def test_async_scheduling_oracle_catches_broken_engine(scheduler_cls, check_id, preset):
    ctx = _context(scheduler_cls, preset, check_id)
    try:
        with pytest.raises(pytest.fail.Exception, match=f"^{check_id}: "):
            CHECKS[check_id](ctx, preset)
    finally:
        ctx.close()


@pytest.mark.parametrize("check_id, preset", [(c, p) for _, c, p in MUTANTS])
def test_async_scheduling_checks_pass_on_the_reference_engine(check_id, preset):
    ctx = _context(Scheduler, preset, check_id)
    try:
        CHECKS[check_id](ctx, preset)
    finally:
        ctx.close()
