"""The connector suite's own false positives, each run with a correct connector in the configuration that
exposed it (issue 19): the check must not fail.

* C05 counted the tokens a request generated after its lookup in the full hit it expects (the reference
  connector failed it with `chunk_size` 16 or 64);
* C11 reported a scenario that could not be set up (no request was preempted) as a failure: it is
  inconclusive, as C26 says;
* C36 rebuilt a `vllm:` target in its child process as `getattr(vllm, name)`;
* C03 built a cross-attention group for vLLM's connectors, which vLLM's engine never hands a connector.

The checks run in this process through the suite's own `CheckContext`, as the suite runs them; the vLLM
cases need the installed vLLM (skipped without one: run with the vLLM venv and `PYTHONPATH` of this tree).
"""

from __future__ import annotations

import importlib.util

import pytest

from harness.targets.connector.selection import connector_target
from harness.targets.connector.target import ConnectorTarget
from suites.connector import test_api, test_isolation, test_lookup, test_tracking
from suites.connector.context import CheckContext, prompt
from tests.vllm_venvs import needs_vllm as needs_vllm_reason

REFERENCE = "reference_impl.connector.lmcache_like:LMCacheLikeConnector"
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason=needs_vllm_reason())


def _vendor(extra: dict) -> ConnectorTarget:
    """The reference connector loaded as a vendor's (`--kv-connector module:Class`), with `extra`."""
    return ConnectorTarget("LMCacheLikeConnector", REFERENCE, "--kv-connector", extra_config=extra)


def _context(target: ConnectorTarget, preset: str | None, check_id: str) -> CheckContext:
    return CheckContext(target, preset, check_id=check_id)


@pytest.mark.parametrize("chunk", [16, 64, 256])
@pytest.mark.parametrize("preset", ["fa_only", "fa+swa+mamba"])
def test_c05_expects_the_hit_of_the_prompt_not_of_generated_tokens(chunk, preset):
    ctx = _context(_vendor({"chunk_size": chunk}), preset, "C05")
    try:
        test_lookup.test_c05_lookup_none_then_value(ctx, preset, mode="sync")
    finally:
        ctx.close()


def test_c11_without_a_preemption_is_inconclusive():
    """The connector already holds both of C11's prompts: its hits shrink the prefills, so the small pool never
    forces a preemption. Nothing was judged; that is no failure."""
    ctx = _context(_vendor({}), "fa_only", "C11")
    try:
        warm = ctx.engine()
        for i in range(2):
            ctx.run(warm, prompt(110 + i, 700))
        with pytest.raises(pytest.skip.Exception, match="inconclusive: the preemption scenario did not occur"):
            test_tracking.test_c11_table_tracking(ctx, "fa_only")
    finally:
        ctx.close()


def test_c11_still_judges_when_a_preemption_happens():
    """The same check on an empty store preempts, and passes for the correct connector (it is not always skipped)."""
    ctx = _context(_vendor({}), "fa_only", "C11")
    try:
        test_tracking.test_c11_table_tracking(ctx, "fa_only")
    finally:
        ctx.close()


@needs_vllm
def test_c36_rebuilds_a_vllm_target_in_its_child_process(tmp_path):
    """vLLM's ExampleConnector keeps its store on disk: a second process (another PYTHONHASHSEED) finds what this
    one stored, with vLLM's class behind the adapter rebuilt from `vllm:ExampleConnector`."""
    ctx = _context(connector_target("vllm:ExampleConnector"), None, "C36")
    try:
        test_isolation.test_c36_determinism_across_processes(ctx, tmp_path)
    finally:
        ctx.close()


@needs_vllm
def test_c03_does_not_judge_vllm_connectors_on_cross_attention():
    """DecodeBenchConnector (SupportsHMA) on the three-group preset: the enable_kv_transfer=False and Mamba
    'none' groups are judged, the cross-attention group vLLM never hands a connector is not."""
    # The layout a vLLM release builds for fa+swa+mamba (every block 256: harness.targets.connector.vllm_layouts).
    ctx = _context(connector_target("vllm:DecodeBenchConnector"), "fa+swa+mamba@block256", "C03")
    try:
        test_api.test_c03_group_discovery_rejects(ctx, "fa+swa+mamba@block256")
    finally:
        ctx.close()
