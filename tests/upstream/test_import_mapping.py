"""The upstream job's import mapping and its per-test bookkeeping (no network, no vLLM needed)."""

import textwrap

import pytest

from harness.upstream.import_mapping import map_source, stage_mapped_tests
from harness.upstream.vllm_core_tests import compare, read_junit, summary_line

SOURCE = textwrap.dedent('''\
    import vllm.v1.core.kv_cache_utils as kv_cache_utils
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec
    from vllm.v1.kv_cache_layout import KVCacheLayout
    from vllm.v1.request import Request
    from vllm.v1.core.kv_cache_utils_extra import thing
    monkeypatch.setattr("vllm.v1.core.kv_cache_manager.logger", fake)
    from vllm.v1.hisparse.layout import create_hisparse_layout
    from vllm.v1.hisparse.coordinator import get_hisparse_coordinator
    import vllm.v1.hisparse.runtime as hisparse_runtime_module
''')

EXPECTED = textwrap.dedent('''\
    import reference_impl.kv_cache.kv_cache_utils as kv_cache_utils
    from reference_impl.kv_cache.block_pool import BlockPool
    from vllm.v1.core.sched.scheduler import Scheduler
    from reference_impl.kv_cache.kv_cache_interface import FullAttentionSpec
    from reference_impl.kv_cache.kv_cache_interface import KVCacheLayout
    from vllm.v1.request import Request
    from vllm.v1.core.kv_cache_utils_extra import thing
    monkeypatch.setattr("reference_impl.kv_cache.kv_cache_manager.logger", fake)
    from reference_impl.kv_cache.hisparse_layout import create_hisparse_layout
    from reference_impl.kv_cache.hisparse_coordinator import get_hisparse_coordinator
    import vllm.v1.hisparse.runtime as hisparse_runtime_module
''')


def test_map_source_swaps_only_the_allocator_modules():
    assert map_source(SOURCE) == EXPECTED, (
        "only vllm.v1.core.<allocator module>, kv_cache_interface (with kv_cache_layout, whose enum the reference "
        "keeps there) and HiSparse's layout/coordinator move; its runtime stays")


def test_a_reexported_serving_request_stays_vllms():
    """`Request` is vLLM's serving request, which `vllm.v1.core.kv_cache_manager` only re-exports: a test
    importing it from there gets it from `vllm.v1.request`; the module's own names still move."""
    source = textwrap.dedent('''\
        from vllm.v1.core.kv_cache_manager import KVCacheBlocks, KVCacheManager, Request
        def helper():
            from vllm.v1.core.kv_cache_manager import (
                Request as R,
                KVCacheBlocks,
            )
        from vllm.v1.core.block_pool import Request
    ''')
    assert map_source(source) == textwrap.dedent('''\
        from reference_impl.kv_cache.kv_cache_manager import KVCacheBlocks, KVCacheManager
        from vllm.v1.request import Request
        def helper():
            from vllm.v1.request import Request as R
            from reference_impl.kv_cache.kv_cache_manager import KVCacheBlocks
        from reference_impl.kv_cache.block_pool import Request
    '''), "only the re-exports listed for their module stay vLLM's"
    with pytest.raises(ValueError, match="line 1: .*one import statement per line"):
        map_source("x = 1; from vllm.v1.core.kv_cache_manager import Request\n")


def test_stage_maps_only_the_core_package(tmp_path):
    src = tmp_path / "src"
    (src / "tests/v1/core").mkdir(parents=True)
    (src / "tests/v1/core/test_x.py").write_text(SOURCE)
    (src / "tests/utils.py").write_text(SOURCE)
    mapped = stage_mapped_tests(src, tmp_path / "dst")
    assert [p.name for p in mapped] == ["test_x.py"]
    assert (tmp_path / "dst/tests/v1/core/test_x.py").read_text() == EXPECTED
    assert (tmp_path / "dst/tests/utils.py").read_text() == SOURCE, "shared vLLM helpers are copied unchanged"


JUNIT = '''<?xml version="1.0"?><testsuites><testsuite>
<testcase classname="tests.v1.core.test_a" name="test_ok"/>
<testcase classname="tests.v1.core.test_a" name="test_bad"><failure message="AssertionError: assert 0 == 1248">x</failure></testcase>
<testcase classname="tests.v1.core.test_a" name="test_hub"><failure message="ValidationError: no HF hub">x</failure></testcase>
</testsuite></testsuites>'''


def test_compare_counts_only_tests_passing_on_vllm(tmp_path):
    junit = tmp_path / "j.xml"
    junit.write_text(JUNIT)
    on_vllm = read_junit(junit)
    assert on_vllm["tests/v1/core/test_a.py::test_hub"] == {"outcome": "failed",
                                                            "reason": "ValidationError: no HF hub"}
    on_vllm["tests/v1/core/test_a.py::test_bad"] = {"outcome": "passed", "reason": ""}
    on_ref = read_junit(junit)
    result = compare(on_vllm, on_ref)
    assert (result["collected"], result["pass_on_vllm"], result["pass_on_reference"]) == (3, 2, 1)
    assert result["tests"]["tests/v1/core/test_a.py::test_hub"]["excluded"] == "ValidationError: no HF hub"
    assert result["tests"]["tests/v1/core/test_a.py::test_bad"]["reference_reason"] == \
        "AssertionError: assert 0 == 1248"
    assert summary_line("0.33.0", result).endswith("2 pass on vLLM (CPU), 1 of them pass on the reference (50.0%)")


def test_summary_share_is_rounded_once():
    """1100 of 1130 is 97.345%: 97.3%, not the 97.4% that rounding the stored 0.9735 again gives."""
    result = {"collected": 1215, "pass_on_vllm": 1130, "pass_on_reference": 1100, "pass_rate": 0.9735}
    assert summary_line("0.33.0", result).endswith("1100 of them pass on the reference (97.3%)")
