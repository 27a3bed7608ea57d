"""Only layouts the target builds (issue 31 item 4): on a vLLM release's run a preset the release would not build
is N/A with the reason, and the layout it builds runs instead (harness.targets.connector.vllm_layouts).

The release is a stand-in: a `vllm:` target served by kvconform's reference connector, on a release number the
test gives; the real releases' runs are in docs/vllm-connectors.md.
"""

from __future__ import annotations

import pytest

from harness.targets import vllm_install
from harness.targets.connector.selection import BUILTIN_TARGETS
from harness.targets.connector.target import ConnectorTarget
from harness.targets.connector.vllm_layouts import built_layout, built_presets
from reference_impl.connector.lmcache_like import LMCacheLikeConnector
from reference_impl.engine.presets import get_preset
from suites.connector.context import CheckContext, prompt

# Reviewed data: the layout vLLM builds for each Mamba preset (every block at the Mamba block: the platform raises
# the attention block to the Mamba block and sets the Mamba block to it), and presets it builds as they are.
BUILT = {
    "fa+mamba_align": ("fa+mamba_align@block256", (("full", 256, 0), ("mamba", 256, 0))),
    "fa+swa+mamba": ("fa+swa+mamba@block256", (("full", 256, 0), ("swa", 256, 128), ("mamba", 256, 0))),
}
AS_THEY_ARE = ("fa_only", "fa+swa", "fa16+swa32", "scratch_group", "fa+chunked320", "fa+swa8")


def _release_target() -> ConnectorTarget:
    """A vLLM release's connector as the suite meets it: a `vllm:` spec (here served by the reference class)."""
    return ConnectorTarget("vllm-9.9.9:StandIn", "vllm:StandIn", "--kv-connector", _cls=LMCacheLikeConnector)


@pytest.fixture
def release(monkeypatch):
    """The installed vLLM, as far as the suite asks: release 9.9.9."""
    monkeypatch.setattr(vllm_install, "installed_vllm_version", lambda: "9.9.9")
    return "9.9.9"


@pytest.mark.parametrize("preset", sorted(BUILT))
def test_built_layout_of_a_mamba_preset(preset):
    name, groups = BUILT[preset]
    built = built_layout(preset)
    assert built is not None and built.preset == name
    assert get_preset(name).groups == groups
    assert "not a layout vLLM builds" in built.reason and name in built.reason


@pytest.mark.parametrize("preset", AS_THEY_ARE)
def test_presets_the_release_builds_as_they_are(preset):
    assert built_layout(preset) is None


def test_the_preset_lists_gain_the_built_layouts_once():
    assert built_presets(["fa_only", "fa+swa+mamba", "fa+mamba_align"]) == [
        "fa_only", "fa+swa+mamba", "fa+mamba_align", "fa+swa+mamba@block256", "fa+mamba_align@block256"]
    assert built_presets(["fa_only", "fa+swa"]) == ["fa_only", "fa+swa"]


@pytest.mark.parametrize("preset", sorted(BUILT))
def test_a_preset_the_release_does_not_build_is_na_with_the_reason(release, preset):
    with pytest.raises(pytest.skip.Exception) as skipped:
        CheckContext(_release_target(), preset, check_id="C14")
    message = str(skipped.value)
    assert message.startswith("N/A on 9.9.9: ") and f"preset {preset} (attention blocks of 16 beside a Mamba " \
        "'align' block of 256) is not a layout vLLM builds" in message
    assert f"{BUILT[preset][0]} (every block 256 tokens), runs instead" in message


@pytest.mark.parametrize("preset", sorted(BUILT))
def test_the_built_layout_runs_on_the_release(release, preset):
    ctx = CheckContext(_release_target(), BUILT[preset][0], check_id="C14")
    try:
        engine = ctx.engine()
        sizes = [g.kv_cache_spec.block_size for g in engine.kv_cache_config.kv_cache_groups]
        assert sizes == [256] * len(BUILT[preset][1])
        stored = prompt(7, 700)
        engine.add_request(engine.make_request(stored, max_tokens=2))
        engine.run_until_done()
        reload = ctx.engine()
        request = reload.add_request(reload.make_request(stored + [1], max_tokens=2))
        reload.run_until_done()
        assert request.num_external_computed_tokens == 512  # the stored prompt's whole blocks of 256
    finally:
        ctx.close()


def test_kvconform_runs_the_preset_itself_and_not_the_built_layout():
    target = next(t for t in BUILTIN_TARGETS if t.name == "LMCacheLikeConnector")
    ctx = CheckContext(target, "fa+swa+mamba", check_id="C14")  # no N/A: kvconform's engine builds it
    ctx.close()
    with pytest.raises(pytest.skip.Exception, match="fa\\+swa\\+mamba@block256 is the layout a vLLM release builds in "
                                                    "place of fa\\+swa\\+mamba"):
        CheckContext(target, "fa+swa+mamba@block256", check_id="C14")
