"""The mini engine's test hooks the connector suite observes through: step observers, a detached connector,
and workers under another model name (fault injection)."""

from __future__ import annotations

import uuid

import pytest

from reference_impl.config.objects import KVTransferConfig
from reference_impl.engine.core import EngineConfig, EngineCore, ModelConfig
from suites.connector.context import prompt


def _engine(store: str, load_async: bool = False, **config) -> EngineCore:
    ktc = KVTransferConfig(kv_connector="LMCacheLikeConnector", kv_role="kv_both",
                           kv_connector_module_path="reference_impl.connector.lmcache_like",
                           kv_connector_extra_config={"store_name": store, "load_async": load_async})
    return EngineCore("fa+swa", EngineConfig(model_config=ModelConfig("hooks"), kv_transfer_config=ktc, **config))


def _run(engine, tokens, max_tokens=1):
    request = engine.add_request(engine.make_request(tokens, max_tokens=max_tokens))
    engine.run_until_done()
    return request


def test_observers_see_every_step_with_tables_still_allocated():
    engine = _engine(uuid.uuid4().hex)
    seen = []
    engine.observers.append(lambda so: seen.append(
        {r: engine.manager.get_block_ids(r) for r in so.num_scheduled_tokens}))
    request = _run(engine, prompt(1, 300), max_tokens=2)
    assert len(seen) == engine.step_count, "one observer call per step, idle steps included"
    assert seen[0][request.request_id][0], "the first step's table is visible to the observer"
    assert seen[-1] == {}, "idle steps schedule nothing"


def test_detached_connector_sees_nothing_and_comes_back():
    store = uuid.uuid4().hex
    engine = _engine(store)
    tokens = prompt(2, 600)
    with engine.connector_detached():
        _run(engine, tokens)
    assert engine.connector is not None and all(w.connector is not None for w in engine.workers)
    fresh = _engine(store)
    probe = fresh.make_request(tokens + [1])
    assert fresh.connector.get_num_new_matched_tokens(probe, 0) == (0, False), "a detached run stored something"
    _run(_engine(store), tokens + [2])  # attached (a fresh engine: no local hit to leave holes)
    assert fresh.connector.get_num_new_matched_tokens(fresh.make_request(tokens + [3]), 0)[0] == 512


def test_detaching_with_requests_in_flight_is_refused():
    engine = _engine(uuid.uuid4().hex)
    engine.add_request(engine.make_request(prompt(3, 100)))
    with pytest.raises(RuntimeError, match="in flight"):
        with engine.connector_detached():
            pass


def test_workers_under_another_model_name_cannot_load_what_the_scheduler_found():
    store = uuid.uuid4().hex
    tokens = prompt(4, 600)
    _run(_engine(store), tokens)
    faulty = _engine(store, worker_model="hooks@elsewhere")
    outputs = []
    request = faulty.add_request(faulty.make_request(tokens + [1], max_tokens=2))
    faulty.run_until_done(after_execute=lambda so, out: outputs.append(out))
    assert any(request.request_id in o.failed_recving for o in outputs), "the workers' load must fail"
    assert request.is_finished and not faulty.read_errors, "the request recomputes and reads right KV"


def test_a_failed_async_load_readmits_the_request_as_new_after_a_new_lookup():
    """vLLM 0.33 (`_handle_failed_recving` sets num_computed_tokens to 0; `_handle_blocked_waiting_request` promotes
    the request to WAITING unless it was preempted before): the request was never scheduled, so it comes back as a
    new request, the connector asked again with nothing computed; it is no preemption and never a resumed one."""
    store = uuid.uuid4().hex
    tokens = prompt(4, 600)
    _run(_engine(store), tokens)
    faulty = _engine(store, worker_model="hooks@elsewhere", load_async=True)
    request = faulty.add_request(faulty.make_request(tokens + [1], max_tokens=2))
    outputs, lookups = [], []
    original = faulty.connector.get_num_new_matched_tokens

    def lookup(req, num_computed_tokens):
        lookups.append((req.request_id, req.num_computed_tokens))
        return original(req, num_computed_tokens)

    faulty.connector.get_num_new_matched_tokens = lookup
    schedules = []
    while not request.is_finished:
        schedules.append(faulty.step(after_execute=lambda so, out: outputs.append(out)))
    assert any(request.request_id in o.failed_recving for o in outputs), "the workers' load must fail"
    assert request.num_preemptions == 0
    assert lookups.count((request.request_id, 0)) >= 2, "asked again after the failed load, with nothing computed"
    assert not any(request.request_id in so.scheduled_cached_reqs.resumed_req_ids for so in schedules)
    assert [r.req_id for so in schedules for r in so.scheduled_new_reqs] == [request.request_id]
    assert not faulty.read_errors


def test_a_run_is_stuck_only_past_both_its_step_and_its_time_budget(monkeypatch):
    """`run_until_done(max_steps, min_seconds)`: a request whose transfer finishes on a server's clock gets
    `min_seconds` even when the engine's cheap steps use up `max_steps` first; without it the run is stuck."""
    import time

    engine = EngineCore("fa_only", EngineConfig(model_config=ModelConfig("budget")))
    monkeypatch.setattr(engine, "step", lambda **hooks: setattr(engine, "step_count", engine.step_count + 1))
    done_at = time.monotonic() + 0.3
    monkeypatch.setattr(engine.scheduler, "has_unfinished_requests", lambda: time.monotonic() < done_at)
    engine.run_until_done(max_steps=3, idle_steps=0, min_seconds=5.0)
    assert time.monotonic() >= done_at, "the run returned before the request finished"

    done_at = time.monotonic() + 60
    with pytest.raises(RuntimeError, match=r"^engine did not finish within 3 steps$"):
        engine.run_until_done(max_steps=3, idle_steps=0)
    with pytest.raises(RuntimeError, match=r"^engine did not finish within 3 steps and 0.2 s$"):
        engine.run_until_done(max_steps=3, idle_steps=0, min_seconds=0.2)
