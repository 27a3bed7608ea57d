"""Only layouts the release builds: a model preset as a vLLM release lays it out.

A preset names its groups' block sizes; a vLLM release decides them itself from the model (its platform's
block-size update), and a preset whose sizes that update would change is a model the release never serves.
When the target is a vLLM release (a `vllm:` connector, or `--kv-engine vllm`), every preset passes through
`built_layout` before it is used: the preset the release would not build is N/A with the reason, and the layout
it builds runs as a preset of its own (`NAME@blockN`, reference_impl.engine.presets).

The rule is reviewed data (`MAMBA_BLOCK_RULE`), read in each installed release's source: calling the releases'
own update offline needs a registered model class, an attention backend and a full VllmConfig, whose shapes
change from release to release.
"""

from __future__ import annotations

from dataclasses import dataclass

from reference_impl.engine.presets import BLOCK_SUFFIX, get_preset

__all__ = ["MAMBA_BLOCK_RULE", "BuiltLayout", "built_layout", "built_presets", "is_built_name"]

# Reviewed data. When Mamba states are kept per block (prefix caching on, as in every engine the connector suite
# builds: 'align' mode, or 0.13-0.14's prefix-caching mode), vLLM makes the attention block and the Mamba block
# one size: the attention block is raised until its page holds a Mamba state (in multiples of the kernel
# alignment), and the Mamba block is set to it. Read in:
#   0.13.0 / 0.14.0  vllm/model_executor/models/config.py, HybridAttentionMambaModelConfig.verify_and_update_config
#                    (0.13.0 l. 395-422, 0.14.0 l. 438-459): with prefix caching `attn_block_size` is the smallest
#                    multiple of the Mamba chunk size holding a state, and `cache_config.mamba_block_size =
#                    attn_block_size`;
#   0.20.0           vllm/platforms/interface.py, Platform._align_hybrid_block_size (l. 502-613): the attention
#                    block is raised to `attn_block_size`, then `if cache_config.mamba_cache_mode == "align":
#                    cache_config.mamba_block_size = cache_config.block_size`;
#   0.32.0           the same function (l. 939-1103), the same two steps.
# A preset's Mamba block is the number of attention tokens whose page holds one of its states (the presets pad
# the Mamba page to the attention page of that many tokens), so the release's attention block is the preset's
# attention block times cdiv(mamba block, attention block), and the Mamba block equals it.
MAMBA_BLOCK_RULE = ("vLLM makes the attention block and the Mamba 'align' block one size (its platform's block-size "
                    "update raises the attention block until its page holds a Mamba state and sets "
                    "mamba_block_size to it: Platform._align_hybrid_block_size, or "
                    "HybridAttentionMambaModelConfig.verify_and_update_config before 0.20)")


@dataclass(frozen=True)
class BuiltLayout:
    """What a release builds in place of a preset: `preset`, the name of the layout it builds (`NAME@blockN`),
    and `reason`, why the asked preset is not a layout the release builds."""

    preset: str
    reason: str


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def built_layout(preset: str) -> BuiltLayout | None:
    """The layout a vLLM release builds in place of `preset`, or None when it builds `preset` as it is."""
    groups = get_preset(preset).groups
    mamba = [size for kind, size, _ in groups if kind == "mamba"]
    attention = {size for kind, size, _ in groups if kind != "mamba"}
    if not mamba or not attention:
        return None
    if len(attention) > 1 or len(set(mamba)) > 1:
        raise ValueError(f"preset {preset!r}: a Mamba group beside attention groups of several block sizes "
                         f"({sorted(attention)}) has no reviewed layout rule")
    (attn,), block = attention, mamba[0]
    built = attn * _cdiv(block, attn)
    if built == attn == block:
        return None
    name = f"{preset}{BLOCK_SUFFIX}{built}"
    return BuiltLayout(name, f"preset {preset} (attention blocks of {attn} beside a Mamba 'align' block of {block}) is "
                             f"not a layout vLLM builds: {MAMBA_BLOCK_RULE}; the layout it builds, {name} (every "
                             f"block {built} tokens), runs instead")


def built_presets(presets) -> list[str]:
    """`presets` followed by the layouts a release builds in place of those it would not build (each once)."""
    out = list(presets)
    for preset in presets:
        built = built_layout(preset) if isinstance(preset, str) else None
        if built is not None and built.preset not in out:
            out.append(built.preset)
    return out


def is_built_name(preset: str) -> bool:
    """Whether `preset` names a layout a release builds in place of a preset (`NAME@blockN`)."""
    return BLOCK_SUFFIX in preset


def release_of(target, kv_engine: str) -> str | None:
    """The vLLM release whose layouts a run on `target` under `kv_engine` must keep to: the installed release's
    number for a `vllm:` connector or under `--kv-engine vllm`, None for kvconform's own engine and protocol."""
    from harness.kv_engine import VLLM_ENGINE
    from harness.target_spec import VLLM_PREFIX

    if str(getattr(target, "spec", "")).startswith(VLLM_PREFIX) or kv_engine == VLLM_ENGINE:
        from harness.targets.vllm_install import installed_vllm_version

        return installed_vllm_version()
    return None


def only_built_layouts(preset: str, release: str | None) -> None:
    """End the running check as N/A when `preset` is not a layout its target builds: on a vLLM `release`, a
    preset the release would not build ("N/A on X.Y.Z: ..., the layout it builds runs instead"); elsewhere, a
    `NAME@blockN` layout, which only a release's run adds (kvconform's engine runs NAME itself)."""
    from harness.targets.allocator.capabilities import not_applicable as release_not_applicable
    from harness.targets.connector.profile import not_applicable

    if release is not None:
        built = built_layout(preset)
        if built is not None:
            release_not_applicable(release, built.reason)
    elif is_built_name(preset):
        base = preset.split(BLOCK_SUFFIX)[0]
        not_applicable(f"{preset} is the layout a vLLM release builds in place of {base}; kvconform's engine and "
                       f"connector protocol run {base} itself")


def mamba_none_block(max_model_len: int) -> int:
    """The block a vLLM release gives a Mamba group in mamba_cache_mode 'none' (one state per request, no prefix
    caching of it): the model's whole length. Reviewed data: `MambaModelConfig.verify_and_update_config` sets
    `cache_config.mamba_block_size = model_config.max_model_len` when prefix caching is off (0.13.0
    model_executor/models/config.py l. 308-309, 0.20.0 l. 405-406, 0.32.0 l. 708-709)."""
    return max_model_len
