"""The vLLM config target calls each release's own connector-factory entry point: 0.10.0's
`create_connector_v1(config, role)`, 0.10.1-0.11.0's `create_connector(config, role)` and 0.11.1+'s
`create_connector(config, role, kv_cache_config)` (read in the releases' factory.py). Stand-in factories with
those three signatures record the call they get."""

from __future__ import annotations

import pytest

from harness.targets.config import vllm_target as vllm_config


class _V010Factory:
    """0.10.0: the V1 entry point has its own name beside the V0 one."""

    @classmethod
    def create_connector_v0(cls, rank, local_rank, config):
        raise AssertionError("the V0 entry point must not be called")

    @classmethod
    def create_connector_v1(cls, config, role):
        return ("v1", config, role)


class _V011Factory:
    @classmethod
    def create_connector(cls, config, role):
        return ("two-args", config, role)


class _V013Factory:
    @classmethod
    def create_connector(cls, config, role, kv_cache_config=None):
        return ("three-args", config, role, kv_cache_config)


@pytest.fixture
def no_vllm_kv_cache_config(monkeypatch):
    monkeypatch.setattr(vllm_config, "_empty_kv_cache_config", lambda: "empty-kv-cache-config")


@pytest.mark.parametrize("factory, expected", [
    (_V010Factory, ("v1", "config", "scheduler")),
    (_V011Factory, ("two-args", "config", "scheduler")),
    (_V013Factory, ("three-args", "config", "scheduler", "empty-kv-cache-config")),
], ids=["0.10.0", "0.10.1-0.11.0", "0.11.1+"])
def test_each_release_gets_its_own_factory_call(no_vllm_kv_cache_config, factory, expected):
    assert vllm_config._factory_create(factory, "config", "scheduler") == expected, (
        f"{factory.__name__}: the target must call the release's own entry point with the arguments it takes")


def test_a_constructor_failure_is_seen_under_both_entry_point_names():
    # `_constructor_failure` tells a connector's own constructor from the factory's checks by the factory
    # frame's name and line; 0.10.0's frame is create_connector_v1.
    code = compile("def create_connector_v1():\n    connector_cls(1)\n", "/x/factory.py", "exec")
    function_code = next(c for c in code.co_consts if hasattr(c, "co_name"))
    assert function_code.co_name == "create_connector_v1"
    import linecache
    linecache.cache["/x/factory.py"] = (0, None, ["def create_connector_v1():\n", "    connector_cls(1)\n"],
                                         "/x/factory.py")
    try:
        assert vllm_config._is_factory_constructor_call(function_code, 2) is True
        assert vllm_config._is_factory_constructor_call(function_code, 1) is False
    finally:
        linecache.cache.pop("/x/factory.py", None)
