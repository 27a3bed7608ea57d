"""The connector suite's progress watchdog: an engine that stops making progress fails the check in seconds,
naming the connector hook it waits on, instead of stepping until the per-check time limit.

`CheckContext.engine` attaches a `ProgressWatchdog` to every engine it builds (kvconform's `EngineCore` and, with
`--kv-engine vllm`, vLLM's scheduler behind the same surface): after each step it asks whether the step made
progress. The suite decides what progress is:

- a request computed tokens past the most it ever had (prefill or decode; tokens recomputed after a restart, or
  counted for a load that then failed, are not new);
- a request finished or was aborted, or left the scheduler;
- a finished request's delayed free was released.

An engine with nothing to do (no unfinished request, no delayed free) is idle, never stuck. While busy, steps
without progress are counted; at `NO_PROGRESS_STEPS` the watchdog looks at what the engine waits on:

- a load that keeps failing and being offered again (a failure cycle: each retry fails the same way, and nothing
  outside the engine is awaited), judged by count alone: FAILED_LOADS_IN_A_ROW (10) failures of one request with
  no progress in between (offering a load again after it failed is already C23's defect; ten in a row is no
  flaky backend), or NO_PROGRESS_STEPS, whichever comes first;
- waiting for remote KVs (an asynchronous load never reported finished, or reported by only some TP ranks), a
  lookup that keeps answering None, a delayed free never reported sent: a backend on another machine may
  legitimately take wall time here, so the verdict also waits `WAIT_SECONDS` since the last progress (sleeping
  between steps, as a real engine's idle loop does, instead of spinning);
- a request never scheduled while nothing else is pending (the pool cannot hold it), or requests restarted in
  turn: steps alone.

Why `NO_PROGRESS_STEPS` = 100: the longest stretch without progress a correct connector shows in the suite's
scenarios is a few steps (the simulated backend answers lookups 2 steps late; a preempted request recomputes
its hwm at 128 tokens a step, ~10 steps; vLLM's scheduler gets `vllm_engine.STUCK_STEPS` = 50 steps to admit
a request before that check is N/A, which must decide first); 100 steps is twice the largest of them and,
at a few milliseconds a step, still well under a second. A vendor backend that takes real time is covered by
`WAIT_SECONDS` (5 s, the suite's liveness bound; a twelfth of --kv-connector-timeout), not by more steps.

A wait that outlasted `WAIT_SECONDS` twice for one connector (same stuck state, same hook, in one pytest
process) is taken as the connector's behaviour: later checks judge that state by steps alone, and say so. The
first two verdicts cost their five seconds; the rest of the suite costs no more than a passing run.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

#: Steps in a row without progress (while the engine is busy) after which the engine is taken as stuck.
NO_PROGRESS_STEPS = 100
#: Failed loads of one request, each offered again, with no progress in between: a failure cycle, stuck at once.
FAILED_LOADS_IN_A_ROW = 10
#: Wall time since the last progress a wait on the connector's backend gets before it is taken as stuck, at the
#: default per-check time limit (60 s); a check run under another limit waits `wait_for(limit)`, the same twelfth
#: of it: a vendor whose backend is slow raises --kv-connector-timeout and gets a patient watchdog with it.
WAIT_SECONDS = 5.0
DEFAULT_TIME_LIMIT_S = 60.0


def wait_for(time_limit_s: float) -> float:
    """The wall-time wait on a backend under the per-check limit `time_limit_s` (WAIT_SECONDS at 60 s)."""
    return WAIT_SECONDS * time_limit_s / DEFAULT_TIME_LIMIT_S
#: Verdicts on one (connector, stuck state, hook) that waited out WAIT_SECONDS before later ones use steps alone.
CONFIRMATIONS = 2
#: Sleep per step while waiting out WAIT_SECONDS past the step bound (a real engine's idle loop does not spin).
IDLE_SLEEP_S = 0.005


class NoProgress(AssertionError):
    """The engine made no progress for NO_PROGRESS_STEPS steps: the check fails, naming the hook waited on."""

    def __init__(self, message: str, hook: str | None, kind: str):
        super().__init__(message)
        self.hook = hook
        self.kind = kind


class CheckAbandoned(BaseException):
    """The check this engine belongs to already ran out of time (its verdict is given): the thread still
    stepping it stops at its next step or hook call instead of spinning in the background."""


class StallLog:
    """Which stuck states of which connector waited out WAIT_SECONDS, and in which checks."""

    def __init__(self) -> None:
        self._stalls: dict[tuple[str, str, str], list[str]] = {}

    def record(self, target: str, kind: str, hook: str, check: str) -> None:
        """A check of `target` was stuck in `kind` on `hook` past WAIT_SECONDS."""
        self._stalls.setdefault((target, kind, hook), []).append(check)

    def confirmed(self, target: str, kind: str, hook: str) -> list[str]:
        """The checks that confirmed this stall, once there are CONFIRMATIONS of them (else [])."""
        checks = self._stalls.get((target, kind, hook), [])
        return checks[:CONFIRMATIONS] if len(checks) >= CONFIRMATIONS else []


STALL_LOG = StallLog()


def waited_out(target: str, kind: str, hook: str | None, check: str, elapsed: float, wait_s: float | None = None
               ) -> str | None:
    """Whether a wait of `kind` on `hook`, `elapsed` seconds since the last progress, is over: None while it may
    go on (under `wait_s`, unless STALL_LOG confirmed this stall for `target`), else the note for the verdict
    ("" or why it was judged without waiting). A wait judged in full is recorded for `check`."""
    if kind not in _WALL_CLOCK:
        return ""
    wait_s = WAIT_SECONDS if wait_s is None else wait_s
    confirmed = STALL_LOG.confirmed(target, kind, hook or "")
    if confirmed:
        return f" (judged without waiting: the same wait outlasted {wait_s:g} s in {' and '.join(confirmed)})"
    if elapsed < wait_s:
        return None
    STALL_LOG.record(target, kind, hook or "", check)
    return ""

# Stuck states whose verdict waits for wall time (a remote backend may take it); the others are judged by steps.
_WALL_CLOCK = ("remote-kvs", "lookup-none", "delayed-free")


def verdict(steps: int, elapsed: float, what: str, note: str = "") -> str:
    """The failure message: "no progress for N steps: <what>" on its first line (the root cause the report groups
    by, the same in every check), then the rest of `what`, the time since the last progress and `note`."""
    first, _, rest = what.partition("\n")
    details = [line for line in (rest, f"{elapsed:.1f} s since the last progress{note}") if line]
    return f"no progress for {steps} steps: {first}\n" + "\n".join(details)


def _status_name(request) -> str:
    status = getattr(request, "engine_status", None) or request.status
    return status.name


def _finished(request) -> bool:
    return bool(request.is_finished)


class ProgressWatchdog:
    """Called after every step of `engine` (`engine.after_step`): raises NoProgress once the busy engine made no
    progress for NO_PROGRESS_STEPS steps (and, for a wait on the connector's backend, WAIT_SECONDS).

    `connector` names the class under test in messages, `calls` is the guard's call log (lookup answers),
    `state` the check's guard state (`abandoned` once the check timed out), `target` and `check` key the
    StallLog."""

    def __init__(self, engine, *, connector: str, target: str, check: str | None, calls: list, state: dict):
        self.engine = engine
        self.connector = connector
        self.target = target
        self.check = check or "?"
        self.calls = calls
        self.state = state
        self._calls_seen = len(calls)
        self._hwm: dict[str, int] = {}
        self._unfinished: set[str] = set()
        self._delayed: set[str] = set()
        self._last: dict[str, int] = {}  # req_id -> tokens computed after the previous step
        self._reset()

    def _reset(self) -> None:
        self.steps = 0
        self.since = time.monotonic()
        self.failures: Counter[str] = Counter()
        self.none_answers: Counter[str] = Counter()
        self.answers: dict[str, int] = {}
        self.restarts: Counter[str] = Counter()

    # ---- one step -------------------------------------------------------------------------------------------
    def __call__(self, so, kv_output) -> None:
        if self.state.get("abandoned") == threading.get_ident():
            raise CheckAbandoned("the check already ran out of time")
        self._read_lookups()
        if kv_output is not None:
            for req_id in kv_output.failed_recving or ():
                self.failures[req_id] += 1
        scheduler = self.engine.scheduler
        progress = False
        unfinished = set()
        for req_id, request in scheduler.requests.items():
            if _finished(request):
                continue
            unfinished.add(req_id)
            computed = request.num_computed_tokens
            if computed > self._hwm.get(req_id, 0):
                self._hwm[req_id] = computed
                progress = True
            elif computed < self._last.get(req_id, 0):
                self.restarts[req_id] += 1
        self._last = {r: scheduler.requests[r].num_computed_tokens for r in unfinished}
        delayed = set(scheduler.delayed_free)
        if self._unfinished - unfinished or self._delayed - delayed:
            progress = True  # a request finished, was aborted or left; a delayed free was released
        self._unfinished, self._delayed = unfinished, delayed
        if progress or not (unfinished or delayed):
            self._reset()
            return
        self.steps += 1
        if self.steps >= NO_PROGRESS_STEPS or max(self.failures.values(), default=0) >= FAILED_LOADS_IN_A_ROW:
            self._judge()

    def _read_lookups(self) -> None:
        """The lookup answers since the last step, per request: None ("not ready") counted, numbers kept."""
        new = self.calls[self._calls_seen:]
        self._calls_seen = len(self.calls)
        requests = self.engine.scheduler.requests
        for _role, hook, args, result in new:
            if hook != "get_num_new_matched_tokens" or not args:
                continue
            req_id = getattr(args[0], "request_id", None)
            if req_id not in requests:
                continue
            answer = result[0] if isinstance(result, tuple) and result else None
            if answer is None:
                self.none_answers[req_id] += 1
            else:
                self.none_answers.pop(req_id, None)
                self.answers[req_id] = int(answer)

    # ---- verdict --------------------------------------------------------------------------------------------
    def _judge(self) -> None:
        kind, hook, what = self._diagnose()
        elapsed = time.monotonic() - self.since
        note = waited_out(self.target, kind, hook, self.check, elapsed, self.state.get("wait_s"))
        if note is None:
            time.sleep(IDLE_SLEEP_S)
            return
        raise NoProgress(verdict(self.steps, elapsed, what, note), hook, kind)

    def _hook(self, name: str) -> str:
        return f"{self.connector}.{name}"

    def _report_hook(self) -> str:
        """The worker hook that reports finished transfers: get_transfer_results where the connector has it."""
        worker = self.engine.workers[0].connector if self.engine.workers else None
        try:
            has = worker is not None and hasattr(worker, "get_transfer_results")
        except Exception:  # a guard hiding nothing raises AttributeError only; anything else: assume the old hook
            has = False
        return "get_transfer_results" if has else "get_finished"

    def _finish_hook(self) -> str:
        connector = self.engine.connector
        hma = connector is not None and getattr(self.engine.scheduler, "connector_is_hma", None)
        if hma is None:  # vLLM's scheduler: the guard class says whether vLLM took it for HMA
            hma = "HMA" in type(connector).__name__
        return "request_finished_all_groups" if hma else "request_finished"

    def _describe(self, req_id: str) -> str:
        request = self.engine.scheduler.requests.get(req_id)
        prompt = getattr(request, "num_prompt_tokens", None)
        return f"request {req_id}" + (f" ({prompt} tokens)" if prompt else "")

    def _diagnose(self) -> tuple[str, str | None, str]:
        """(stuck state, the hook waited on, what the engine waits for) for the first request found stuck."""
        scheduler = self.engine.scheduler
        requests = scheduler.requests
        unfinished = [r for r in requests if r in self._unfinished]
        report = self._report_hook()
        failing = [r for r in unfinished if self.failures[r] >= min(2, FAILED_LOADS_IN_A_ROW)]
        if failing:
            req_id = max(failing, key=lambda r: self.failures[r])
            hit = self.answers.get(req_id)
            offered = f"the same {hit}-token hit" if hit else "the same hit"
            return ("load-failed", "get_num_new_matched_tokens",
                    f"{self._describe(req_id)} waits on a load that failed {self.failures[req_id]} times: "
                    f"{self._hook('get_num_new_matched_tokens')} offers {offered} again after each failure\n"
                    f"start_load_kv's load is reported failed by {report}; vLLM recomputes the request and asks "
                    "again, so a load that failed must not be offered again (C23)")
        loading = [r for r in unfinished if _status_name(requests[r]) == "WAITING_FOR_REMOTE_KVS"]
        if loading:
            req_id = loading[0]
            pending = getattr(getattr(self.engine, "aggregator", None), "pending", None) or {}
            ranks = pending.get(req_id) if isinstance(pending, dict) else None
            partial = ""
            if ranks:
                partial = (f"; reported by only {len(ranks)} of "
                           f"{len(self.engine.workers)} TP ranks")
            return ("remote-kvs", report,
                    f"{self._describe(req_id)} waits for remote KVs: {self._hook(report)} never reported its "
                    f"asynchronous load finished{partial}\nthe load was planned in update_state_after_alloc and "
                    f"started by start_load_kv; vLLM keeps the request waiting until finished_recving names it")
        never_ready = [r for r in unfinished if self.none_answers[r] > 0]
        if never_ready:
            req_id = max(never_ready, key=lambda r: self.none_answers[r])
            return ("lookup-none", "get_num_new_matched_tokens",
                    f"{self._describe(req_id)} is never admitted: {self._hook('get_num_new_matched_tokens')} "
                    f"answered None (not ready yet) {self.none_answers[req_id]} times in a row")
        if self._delayed:
            req_id = sorted(self._delayed)[0]
            return ("delayed-free", report,
                    f"finished {self._describe(req_id)} holds its blocks: {self._hook(report)} never reported "
                    f"its transfer finished\n{self._finish_hook()} delayed its free (a send in flight), or it was "
                    "aborted while its load was in flight; vLLM frees the blocks only once finished_sending (or "
                    "finished_recving) names it")
        restarted = [r for r in unfinished if self.restarts[r] >= 2]
        if restarted:
            req_id = max(restarted, key=lambda r: self.restarts[r])
            return ("restarts", None,
                    f"{self._describe(req_id)} was restarted {self.restarts[req_id]} times without computing "
                    "anything new (preempted, or its load failed, and recomputed in turn)")
        waiting = [r for r in unfinished if _status_name(requests[r]) in ("WAITING", "PREEMPTED")]
        if waiting:
            req_id = waiting[0]
            hit = self.answers.get(req_id)
            asked = (f" ({self._hook('get_num_new_matched_tokens')} answered {hit})" if hit is not None else "")
            return ("not-scheduled", "get_num_new_matched_tokens" if hit else None,
                    f"{self._describe(req_id)} is never scheduled{asked}: the pool of "
                    f"{self.engine.config.num_blocks} blocks cannot hold it, and nothing pending will free blocks")
        req_id = unfinished[0] if unfinished else "?"
        return ("stalled", None, f"{self._describe(req_id)} is {_status_name(requests[req_id]) if unfinished else '?'} "
                                 "and computes nothing")
