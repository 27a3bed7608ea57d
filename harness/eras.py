"""vLLM rule eras as the harness selects them: ids, representative releases and `--vllm-version` values.

The era ids and release ranges have one home, `reference_impl.config.eras`; this module adapts them to the
harness (a selection error names the option). The oracle's decision tables stay independent of the
resolver's rules: only the vocabulary of eras is shared.
"""

from __future__ import annotations

from reference_impl.config import eras as _eras

ERA_IDS: tuple[str, ...] = tuple(era.id for era in _eras.ERAS)
# Profile name (its era's id) -> release, oldest first (the release registry's rows marked `profile`).
PROFILES = _eras.PROFILES
# Era id -> the representative release the era is tested at.
ERA_RELEASES: dict[str, str] = {era.id: era.representative for era in _eras.ERAS}
# Era id -> the first release that follows its rules (3 parts), and the first release kvconform does not know.
ERA_FIRST_VERSIONS: dict[str, tuple[int, ...]] = {
    era.id: tuple(era.first_version) + (0,) * (3 - len(era.first_version)) for era in _eras.ERAS}
NEWEST_EXCLUSIVE: tuple[int, ...] = tuple(_eras.NEWEST_EXCLUSIVE)
# The eras whose flag is tri-state (absent = let vLLM decide), and those whose command line spells the explicit
# enable `--enable-hybrid-kv-cache-manager` (earlier ones: `--no-disable-hybrid-kv-cache-manager`).
TRI_STATE_ERAS: frozenset[str] = frozenset(era.id for era in _eras.ERAS if era.tri_state_flag)
ENABLE_FLAG_ERAS: frozenset[str] = frozenset(era.id for era in _eras.ERAS if era.cli_enable_form)


class EraSelectionError(ValueError):
    """A `--vllm-version` value that is neither a known era/profile nor a version in the known range."""


def era_for_version(version: str) -> str:
    """The era id whose releases include `version` (X.Y.Z in the range `_eras.known_range()` names)."""
    try:
        return _eras.era_for_version(version).id
    except ValueError as exc:
        # the message already lists the profiles; name only the era ids that are not also profiles
        others = [era for era in ERA_IDS if era not in _eras.PROFILES]
        raise EraSelectionError(f"--vllm-version: {str(exc).removeprefix('vllm_version: ')}; or an era id: "
                                f"{', '.join(others)}") from None


def select_eras(value: str | None) -> tuple[str, ...]:
    """Eras a run covers: all of them for None, else the one era a profile, era id or version names."""
    if value is None:
        return ERA_IDS
    value = value.strip()
    if value in ERA_IDS:
        return (value,)
    if value in _eras.PROFILES:
        return (era_for_version(_eras.PROFILES[value]),)
    return (era_for_version(value),)
