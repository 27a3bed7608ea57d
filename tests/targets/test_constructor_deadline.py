"""The vllm config target gives a connector constructor a deadline: LMCacheMPConnector's waits, with no timeout,
for LMCache's MP server, which hung `random_cases` for good. A constructor that does not return is reported as
the factory having accepted the connector (its own checks passed) and the constructor failing here; a factory
that hangs before the constructor is not."""

from __future__ import annotations

import importlib.util
import threading
import time

import pytest

from harness.targets.config import vllm_target as vllm_config
from harness.targets.config.vllm_target import ConstructorDeadline, _constructor_failure, _within_deadline

# A stand-in for vLLM's kv_connector/factory.py, as a module of that file name: the target recognises the
# factory's frame by file name, function name and the `connector_cls(` call on the line.
FACTORY = '''
def create_connector(connector_cls, release, hang_before):
    if hang_before:
        release.wait()
    return connector_cls(release)
'''


class KVConnectorBase_V1:  # noqa: N801  (vLLM's base class name, which the target looks for)
    """Stands in for vLLM's connector base class."""


class _WaitsForAServer(KVConnectorBase_V1):
    def __init__(self, release):
        release.wait()


class MultiConnector(KVConnectorBase_V1):
    """Builds its child in its own constructor, as vLLM's does."""

    def __init__(self, release):
        self.child = _WaitsForAServer(release)


@pytest.fixture
def factory(tmp_path, monkeypatch):
    path = tmp_path / "factory.py"
    path.write_text(FACTORY, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("kvconform_test_factory", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(vllm_config, "CONSTRUCTOR_DEADLINE_S", 0.2)
    release = threading.Event()
    yield module, release
    release.set()  # let the abandoned threads finish


def test_a_constructor_that_never_returns_is_a_constructor_failure(factory):
    module, release = factory
    with pytest.raises(ConstructorDeadline) as raised:
        _within_deadline(lambda: module.create_connector(_WaitsForAServer, release, hang_before=False))
    assert raised.value.in_constructor, "the thread waited inside connector_cls(...): the factory had accepted it"
    assert _constructor_failure(raised.value)
    assert "did not return within 0.2 s" in str(raised.value)


def test_a_class_that_waited_once_fails_at_once_the_next_time(factory, monkeypatch):
    """The second construction of a class that waited past the deadline raises at once: the same outcome (a
    constructor failing here) without another wait; its real constructor is back afterwards."""
    module, release = factory
    monkeypatch.setattr(vllm_config, "_WAITED_PAST_DEADLINE", set())
    with pytest.raises(ConstructorDeadline):
        _within_deadline(lambda: module.create_connector(_WaitsForAServer, release, hang_before=False))
    assert vllm_config._WAITED_PAST_DEADLINE == {_WaitsForAServer}
    monkeypatch.setattr(vllm_config, "CONSTRUCTOR_DEADLINE_S", 30.0)
    started = time.monotonic()
    with pytest.raises(ConstructorDeadline) as raised:
        _within_deadline(lambda: module.create_connector(_WaitsForAServer, release, hang_before=False))
    assert time.monotonic() - started < 10, "the known waiter must fail at once, not wait out the 30 s deadline"
    assert _constructor_failure(raised.value)
    release.set()
    assert isinstance(_WaitsForAServer(release), _WaitsForAServer), "the real constructor is restored"


def test_a_multi_connector_waiting_for_its_child_records_the_child(factory, monkeypatch):
    """Only the child that waits is a known waiter: MultiConnector's own checks must keep running later."""
    module, release = factory
    monkeypatch.setattr(vllm_config, "_WAITED_PAST_DEADLINE", set())
    with pytest.raises(ConstructorDeadline) as raised:
        _within_deadline(lambda: module.create_connector(MultiConnector, release, hang_before=False))
    assert raised.value.in_constructor
    assert vllm_config._WAITED_PAST_DEADLINE == {_WaitsForAServer}, "the waiting child, not the MultiConnector"


def test_a_factory_that_hangs_before_the_constructor_is_not(factory):
    module, release = factory
    with pytest.raises(ConstructorDeadline) as raised:
        _within_deadline(lambda: module.create_connector(_WaitsForAServer, release, hang_before=True))
    assert not raised.value.in_constructor and not _constructor_failure(raised.value), (
        "the factory had not reached the constructor: its own checks did not finish")


def test_a_result_or_an_exception_comes_back_as_it_is():
    assert _within_deadline(lambda: 42) == 42
    with pytest.raises(KeyError, match="boom"):
        _within_deadline(lambda: {}["boom"])


class _HoldsAContext(KVConnectorBase_V1):
    """Like vLLM 0.25.0's MooncakeStoreConnector on the scheduler side: opens a resource in its constructor and
    closes it nowhere; finalizing the resource (pyzmq's Context.__del__ -> destroy) is what must not happen."""

    finalized: list[str] = []

    def __init__(self, release, fail=False):
        self.resource = _Finalizer(self.finalized)
        if fail:
            raise RuntimeError("a later part of the constructor fails here")


class _Finalizer:
    def __init__(self, log):
        self.log = log

    def __del__(self):
        self.log.append("finalized")


@pytest.mark.parametrize("fail", [False, True], ids=["built", "failed-half-way"])
def test_what_the_factory_built_is_never_finalized_mid_run(factory, monkeypatch, fail):
    """A connector the factory built, or built half-way before raising, stays referenced after the case: the
    garbage collector must not run its resources' finalizers in a later case (a ZMQ context's blocks for good)."""
    import gc

    module, release = factory
    monkeypatch.setattr(vllm_config, "_KEPT_ALIVE", [])
    monkeypatch.setattr(_HoldsAContext, "finalized", [])
    try:
        _within_deadline(lambda: module.create_connector(lambda r: _HoldsAContext(r, fail), release, hang_before=False))
    except RuntimeError:
        assert fail
    gc.collect()
    assert _HoldsAContext.finalized == [], "the connector's resource was finalized after the case ended"
    assert len(vllm_config._KEPT_ALIVE) == 1
