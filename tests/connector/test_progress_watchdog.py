"""A livelock is a verdict in seconds: the connector suite's progress watchdog (`suites.connector.watchdog`) fails
a check whose engine stops making progress, naming the hook it waits on and the steps it waited, and leaves
correct connectors alone, slow asynchronous loads included. A check that still runs out of time names a hook.

The livelocking connectors are in `tests/connector/livelock.py` (the template with one liveness mistake each)."""

from __future__ import annotations

import threading
import time

import pytest

from harness.targets.connector.target import ConnectorTarget
from reference_impl.connector.base import KVConnectorRole
from suites.connector import test_lookup, watchdog
from suites.connector.context import CheckContext, prompt
from suites.connector.runner import ConnectorGuard, run_with_timeout
from suites.connector.watchdog import (FAILED_LOADS_IN_A_ROW, NO_PROGRESS_STEPS, WAIT_SECONDS, NoProgress, StallLog,
                                      wait_for, waited_out)
from tests.vllm_venvs import needs_vllm

LIVELOCK = "tests.connector.livelock"


def _context(cls: str, preset: str, check_id: str = "C14", name: str | None = None) -> CheckContext:
    """A check's context for the livelock module's `cls`, run as a vendor's connector, without backdoors; `name`
    is the target's (a fresh one by default: the stall log keys confirmations by it)."""
    target = ConnectorTarget(name or f"{cls}-{time.monotonic_ns()}", f"{LIVELOCK}:{cls}", "--kv-connector")
    return CheckContext(target, preset, backdoors=False, check_id=check_id)


def _store_then_reload(ctx: CheckContext) -> None:
    """Store a prompt of one chunk and a few tokens, then reload it (the shortest scenario with a hit)."""
    engine = ctx.engine()
    ctx.store_then_reload(engine, prompt(5, 270))


@pytest.fixture
def short_wait(monkeypatch):
    """A wait on the backend is judged after 0.3 s instead of WAIT_SECONDS (the tests stay cheap); the step bound
    is the suite's."""
    monkeypatch.setattr(watchdog, "WAIT_SECONDS", 0.3)
    monkeypatch.setattr(watchdog, "STALL_LOG", StallLog())


# (connector, preset, stuck state, hook named, what the message says)
LIVELOCKS = [
    ("RetriedFailingLoadConnector", "fa_only", "load-failed", "get_num_new_matched_tokens",
     "waits on a load that failed"),
    ("WindowBlindRetryConnector", "fa+swa", "load-failed", "get_num_new_matched_tokens",
     "waits on a load that failed"),
    ("SilentGetFinishedConnector", "fa+swa", "remote-kvs", "get_transfer_results", "waits for remote KVs"),
    ("NeverReadyLookupConnector", "fa_only", "lookup-none", "get_num_new_matched_tokens", "is never admitted"),
    ("UnreportedSendConnector", "fa+swa", "delayed-free", "get_transfer_results", "holds its blocks"),
]


@pytest.mark.parametrize("cls, preset, kind, hook, what", LIVELOCKS, ids=[f"{c[0]}-{c[1]}" for c in LIVELOCKS])
def test_a_livelock_fails_in_steps_naming_the_hook(short_wait, cls, preset, kind, hook, what):
    ctx = _context(cls, preset)
    try:
        with pytest.raises(NoProgress) as raised:
            _store_then_reload(ctx)
        steps = ctx.engines[-1].step_count
    finally:
        ctx.close()
    message = str(raised.value)
    assert (raised.value.kind, raised.value.hook) == (kind, hook), message
    assert message.startswith("no progress for "), message
    if kind == "load-failed":  # a failure cycle: judged by its count, before the step bound
        assert f"waits on a load that failed {FAILED_LOADS_IN_A_ROW} times" in message, message
    assert what in message and f"{cls}.{hook}" in message, message
    # Steps alone judge a failure cycle; a wait on the backend takes its wall time and no more than a few steps
    # past it (the engine sleeps between steps once the step bound is reached).
    assert steps < 4 * NO_PROGRESS_STEPS or kind in watchdog._WALL_CLOCK, steps


def test_a_stall_confirmed_twice_is_then_judged_without_waiting(short_wait):
    messages = []
    for check in ("C10", "C11", "C12"):
        ctx = _context("SilentGetFinishedConnector", "fa_only", check, name="SilentGetFinishedConnector")
        try:
            with pytest.raises(NoProgress, match="waits for remote KVs") as raised:
                _store_then_reload(ctx)
        finally:
            ctx.close()
        messages.append(str(raised.value))
    assert ["judged without waiting" in m for m in messages] == [False, False, True], messages
    assert messages[2].endswith("(judged without waiting: the same wait outlasted 0.3 s in C10 and C11)")


def test_waited_out_counts_confirmations_per_connector_state_and_hook(monkeypatch):
    monkeypatch.setattr(watchdog, "STALL_LOG", StallLog())
    assert waited_out("V", "load-failed", "get_num_new_matched_tokens", "C07", 0.0) == ""  # steps alone
    assert waited_out("V", "remote-kvs", "get_finished", "C07", 1.0, wait_s=5) is None  # may still come
    assert waited_out("V", "remote-kvs", "get_finished", "C07", 5.0, wait_s=5) == ""
    assert waited_out("V", "remote-kvs", "get_finished", "C09", 0.0, wait_s=5) is None  # one is not enough
    assert waited_out("V", "remote-kvs", "get_finished", "C09", 5.0, wait_s=5) == ""
    note = waited_out("V", "remote-kvs", "get_finished", "C10", 0.0, wait_s=5)
    assert note == " (judged without waiting: the same wait outlasted 5 s in C07 and C09)"
    assert waited_out("W", "remote-kvs", "get_finished", "C10", 0.0, wait_s=5) is None
    assert waited_out("V", "delayed-free", "get_finished", "C10", 0.0, wait_s=5) is None


@pytest.mark.parametrize("cls, preset", [("SlowAsyncConnector", "fa+swa"), ("SlowAsyncConnector", "fa+swa+mamba"),
                                         ("SlowerThanTheStepBoundConnector", "fa_only")])
def test_slow_but_progressing_loads_never_trip_it(cls, preset):
    """Asynchronous loads reported 40 steps and 0.3 s late, or 150 steps (past the step bound) and 1 s late: the
    engine waits, and the run completes with every byte right."""
    ctx = _context(cls, preset)
    try:
        engine = ctx.engine()
        for seed in (1, 2):
            request = ctx.store_then_reload(engine, prompt(seed, 600))
            assert request.num_external_computed_tokens > 0 and request.is_finished
        assert not engine.read_errors
    finally:
        ctx.close()


def test_an_idle_engine_is_never_stuck():
    ctx = _context("SilentGetFinishedConnector", "fa_only")
    try:
        engine = ctx.engine()
        for _ in range(NO_PROGRESS_STEPS + 10):
            engine.step()
    finally:
        ctx.close()


class _Spinner:
    """A connector stand-in whose one hook returns at once (a check looping on it never ends by itself)."""

    def poll(self):
        return None


def test_a_timeout_between_hooks_names_the_hook_and_stops_the_thread():
    state: dict = {"current": None}
    guard = ConnectorGuard(_Spinner(), KVConnectorRole.SCHEDULER, [], {}, state)
    ended = threading.Event()

    def spin():
        try:
            while True:
                guard.poll()
                time.sleep(0.001)
        finally:
            ended.set()

    with pytest.raises(AssertionError) as raised:
        run_with_timeout(spin, 0.3, state)
    message = str(raised.value)
    assert message.startswith("check ran past 0.3s; between hooks when time ran out") and \
        "most in _Spinner.poll (scheduler)" in message, message
    assert ended.wait(5), "the timed-out check's thread kept running"
    guard.poll()  # the caller's thread (a check's teardown) still calls hooks


@pytest.mark.parametrize("check, preset, evidence", [
    ("test_c07_hit_min_over_groups", "fa+swa", "but sliding-window group 1 never exposed tokens"),
    ("test_c09_mamba_boundary_only", "fa+mamba_align",
     "waits on a load that failed 10 times: WindowBlindRetryConnector.get_num_new_matched_tokens offers"),
])
def test_issue_35s_window_blind_connector_fails_c07_and_c09_instead_of_spinning(check, preset, evidence):
    """Issue 35's connector (a hit that ignores the sliding-window and Mamba groups, offered again after each failed
    load), black box: C07 and C09 fail (the check's own evidence or the watchdog's verdict) instead of stepping
    until the time limit."""
    ctx = _context("WindowBlindRetryConnector", preset, check.split("_")[1].upper())
    try:
        with pytest.raises((AssertionError, pytest.fail.Exception)) as raised:
            getattr(test_lookup, check)(ctx, preset)
    finally:
        ctx.close()
    assert evidence in str(raised.value), str(raised.value)


def test_a_check_that_ran_out_of_time_leaves_its_engines_to_the_stuck_thread():
    """A real hang (a finish hook that blocks for ever) still costs the time limit and names the hook; the check's
    teardown does not call into the engines the stuck thread holds (an abort would call the blocking hook)."""
    ctx = _context("BlockingFinishConnector", "fa_only")
    engine = ctx.engine()
    # Two requests in flight: the first one's finish blocks, the second is still unfinished at teardown.
    engine.add_request(engine.make_request(prompt(1, 40), max_tokens=1))
    pending = engine.add_request(engine.make_request(prompt(2, 40), max_tokens=50))
    with pytest.raises(AssertionError) as raised:
        run_with_timeout(engine.run_until_done, 0.5, ctx.state)
    assert "check hung past 0.5s (inside BlockingFinishConnector.request_finished_all_groups (scheduler))" \
        == str(raised.value)
    ctx.close()  # returns: the unfinished request is not aborted through the blocking hook
    assert not pending.is_finished


def test_the_wait_on_a_backend_is_a_twelfth_of_the_time_limit(monkeypatch):
    """At the default limit (60 s) 5 s; a vendor with a slow backend raises --kv-connector-timeout and the watchdog
    waits longer with it (the runner puts the check's wait in its state, as here)."""
    assert (wait_for(60), wait_for(180)) == (WAIT_SECONDS, 3 * WAIT_SECONDS)
    monkeypatch.setattr(watchdog, "STALL_LOG", StallLog())
    ctx = _context("SilentGetFinishedConnector", "fa_only")
    ctx.state["wait_s"] = wait_for(3)  # 0.25 s
    try:
        with pytest.raises(NoProgress, match="waits for remote KVs") as raised:
            _store_then_reload(ctx)
    finally:
        ctx.close()
    waited = float(str(raised.value).splitlines()[-1].split(" s since")[0])
    assert waited >= wait_for(3), str(raised.value)


@pytest.mark.parametrize("cls, what", [("SilentGetFinishedConnector", "waits for remote KVs"),
                                       ("NeverReadyLookupConnector", "is never admitted")])
def test_under_vllms_own_scheduler_too(short_wait, cls, what):
    """`--kv-engine vllm`: vLLM's Scheduler drives the connector's scheduler side; the watchdog judges its steps."""
    pytest.importorskip("vllm", reason=needs_vllm())
    from harness.kv_engine import VLLM_ENGINE

    target = ConnectorTarget(f"{cls}-{time.monotonic_ns()}", f"{LIVELOCK}:{cls}", "--kv-connector")
    ctx = CheckContext(target, "fa_only", backdoors=False, check_id="C14", kv_engine=VLLM_ENGINE)
    try:
        with pytest.raises(NoProgress, match=what) as raised:
            _store_then_reload(ctx)
    finally:
        ctx.close()
    assert f"{cls}." in str(raised.value)
