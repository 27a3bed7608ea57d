"""The report's table of KV cache groups per model preset (harness.report.connector_section.PRESET_GROUPS, kept so
that rendering imports no torch) says what the presets themselves say."""

from __future__ import annotations

import pytest

from harness.report.connector_section import PRESET_BLOCK_SUFFIX, PRESET_GROUPS, is_multi_group, preset_groups
from reference_impl.engine.presets import BLOCK_SUFFIX, PRESETS, get_preset


def test_the_table_has_every_preset_with_its_groups():
    assert PRESET_GROUPS == {name: len(preset.groups) for name, preset in PRESETS.items()}
    assert PRESET_BLOCK_SUFFIX == BLOCK_SUFFIX


@pytest.mark.parametrize("name", [*PRESETS, "fa+swa+mamba@block16", "fa_only@block64", "fa+swa@block0", "nope",
                                  "nope@block16", "fa+swa@blockx"])
def test_a_name_has_the_groups_get_preset_builds(name):
    try:
        expected = len(get_preset(name).groups)
    except ValueError:
        expected = None
    assert preset_groups(name) == expected
    assert is_multi_group({"cell": {"preset": name}}) == (expected is not None and expected > 1)
