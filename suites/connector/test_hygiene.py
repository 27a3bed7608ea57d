"""Spec 4.2, robustness: C31 state-hygiene, C32 events-group-aware, C33 multiconnector, C35 capacity-pressure."""

from __future__ import annotations

import random
import uuid

import pytest

from harness import outcomes
from harness.kv_engine import VLLM_ENGINE
from suites.connector import stub
from suites.connector.context import (
    SMALL_STORE_BYTES,
    expect,
    expect_no_read_errors,
    expect_store_makes_room,
    prompt,
)


@pytest.mark.kv_check("C31")
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa+mamba"])
def test_c31_state_hygiene(ctx, preset):
    """30 random requests (shared prefixes, aborts, preemptions): afterwards no request state or pin is left."""
    engine = ctx.engine(num_blocks=130, max_num_batched_tokens=512, cpu_bytes=SMALL_STORE_BYTES)
    instances = (("scheduler", engine.connector), ("worker", engine.workers[0].connector))
    probes = {role: ctx.optional_backdoor(instance, "kvconform_open_state") for role, instance in instances}
    baselines = {role: probe() for role, probe in probes.items() if probe is not None}  # a vendor store is shared
    rng = random.Random(31)
    bases = [prompt(310 + i, 600) for i in range(3)]
    for tokens in bases:
        ctx.run(engine, tokens)  # stored: later requests sharing these prefixes get hits (and pins)
    live = []
    for i in range(30):
        tokens = rng.choice(bases)[: rng.randrange(200, 600)] + prompt(i, rng.randrange(1, 80))
        live.append(engine.add_request(engine.make_request(tokens, max_tokens=rng.randrange(1, 4))))
        engine.step()
        if rng.random() < 0.25:
            # Waiting requests first: they may hold lookup pins without ever being admitted.
            waiting = [r for r in live if not r.is_finished and r in engine.scheduler.waiting]
            engine.abort_request(rng.choice(waiting or live).request_id)
    ctx.drain(engine, "random workload")
    for role, baseline in baselines.items():
        leftovers = {k: v for k, v in probes[role]().items() if v > baseline.get(k, 0)}
        expect(not leftovers, f"{role} role keeps per-request state after all requests finished: {leftovers}")
    expect_no_read_errors(engine, "random workload")
    expect_store_makes_room(ctx, ctx.engine(), "after the random workload", seed=3100)


@pytest.mark.kv_check("C32")
@pytest.mark.parametrize("preset", ["fa+swa"])
def test_c32_events_group_aware(ctx, preset):
    """KV events, when emitted, carry group information (a group index, or a group-qualified key)."""
    engine = ctx.engine()
    ctx.run(engine, prompt(32, 600))
    events = list(engine.scheduler.connector_events)
    if not events:
        outcomes.not_applicable("feature", "the connector emits no KV cache events")
    for event in events:
        has_group = hasattr(event, "group_idx") or any("|g" in str(part) for part in
                                                       (event if isinstance(event, tuple) else (event,)))
        expect(has_group, f"event without group information: {event!r}")


@pytest.mark.kv_check("C33")
@pytest.mark.parametrize("preset", ["fa+swa"])
def test_c33_multiconnector(ctx, preset):
    """Inside MultiConnector next to another HMA child, both children get request_finished_all_groups."""
    if not ctx.is_hma:
        outcomes.not_applicable("declaration", f"{ctx.cls.__name__} cannot be a MultiConnector child on HMA models")
    if ctx.kv_engine == VLLM_ENGINE and getattr(ctx.cls, "vllm_name", None):
        from suites.connector.vllm_engine import VLLM_MULTI_CONNECTOR, not_applicable_on_vllm

        not_applicable_on_vllm(VLLM_MULTI_CONNECTOR, check="C33")
    log = uuid.uuid4().hex
    # Each child's config as vLLM's MultiConnector takes it (vLLM's config validation wants every child's kv_role).
    children = [
        {"kv_connector": ctx.cls.__name__, "kv_connector_module_path": ctx.cls.__module__, "kv_role": "kv_both",
         "kv_connector_extra_config": ctx.extra_config()},
        {"kv_connector": "RecordingHMAConnector", "kv_connector_module_path": stub.__name__, "kv_role": "kv_both",
         "kv_connector_extra_config": {"log": log}},
    ]
    multi = ctx.target.__class__("MultiConnector", "reference_impl.connector.multi:MultiConnector", "check C33",
                                 extra_config={"connectors": children})
    from suites.connector.context import CheckContext
    wrapped = CheckContext(multi, preset, kv_engine=ctx.kv_engine)
    wrapped.profile = ctx.profile  # the connector under test's kind decides what is judged, not the wrapper's
    try:
        engine = wrapped.engine(extra={"connectors": children})
        requests = [wrapped.run(engine, prompt(330 + i, 500)) for i in range(2)]
    finally:
        wrapped.close()  # the wrapper's engine is not the check context's: shut its connectors down here
    calls = stub.RECORDED.get(log, [])
    for request in requests:
        got = [c for c in calls if c[1] == request.request_id]
        expect(got == [("request_finished_all_groups", request.request_id)],
               f"the HMA child saw {got} for {request.request_id}; expected one request_finished_all_groups")
    expect_no_read_errors(engine, "MultiConnector")


@pytest.mark.kv_check("C35")
@pytest.mark.parametrize("preset", ["fa+swa", "fa+swa+mamba"])
def test_c35_capacity_pressure(ctx, preset):
    """With a full backend, stores degrade (fewer chunks, LRU) and every hit still serves the right bytes, and
    the store keeps making room. Built-ins get a tiny store; a vendor's store is driven as far as the
    capacity probe goes (pass a small capacity in --kv-connector-extra-config to make it fill)."""
    engine = ctx.engine(cpu_bytes=200_000)
    prompts = [prompt(350 + i, 800) for i in range(5)]
    for tokens in prompts:
        ctx.run(engine, tokens)
    ctx.wipe(engine)
    for tokens in prompts:
        ctx.run(engine, tokens + [1])
    expect_no_read_errors(engine, "reloads under capacity pressure")
    expect_store_makes_room(ctx, engine, "under capacity pressure", seed=3500)
