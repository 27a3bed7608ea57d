"""Which placement builder the reference's planner uses when vLLM's platform layer is loaded beside it."""

import sys
from types import SimpleNamespace

import pytest

from reference_impl.kv_cache.kv_cache_config_builder import get_kv_cache_config_builder
from reference_impl.kv_cache.kv_cache_planning import DefaultKVCacheConfigBuilder


class _OtherBuilder(DefaultKVCacheConfigBuilder):
    """A builder a platform plugin could name."""


def _platform_naming(monkeypatch, qualname):
    hook = SimpleNamespace(get_kv_cache_config_builder_cls=lambda vllm_config: qualname)
    monkeypatch.setitem(sys.modules, "vllm.platforms", SimpleNamespace(current_platform=hook))


@pytest.mark.parametrize("qualname", [None, "vllm.v1.core.kv_cache_planning.DefaultKVCacheConfigBuilder"])
def test_vllms_default_hook_means_the_references_default_builder(monkeypatch, qualname):
    """vLLM's default hook names vLLM's own default builder; the reference plans with its own default then,
    never with vLLM's planner (which would wrap the reference's specs in vLLM's spec classes)."""
    _platform_naming(monkeypatch, qualname)
    assert type(get_kv_cache_config_builder(None)) is DefaultKVCacheConfigBuilder


def test_a_platforms_own_builder_is_used(monkeypatch):
    _platform_naming(monkeypatch, f"{__name__}._OtherBuilder")
    assert type(get_kv_cache_config_builder(None)) is _OtherBuilder
