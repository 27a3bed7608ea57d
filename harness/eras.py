"""vLLM rule eras as the team contract names them, and `--vllm-version` selections mapped onto them.

The era ids and the releases each one covers are fixed in the developers' guide; this module is the
harness's copy of that contract (the reference resolver keeps its own, so the two stay independent).
"""

from __future__ import annotations

import re

# (era id, first release it covers), oldest first. An era runs up to the next era's first release;
# the newest one covers its own minor series only.
ERA_FIRST_RELEASES: tuple[tuple[str, tuple[int, int, int]], ...] = (
    ("v0.10", (0, 10, 0)),
    ("v0.11", (0, 11, 0)),
    ("pre-seed", (0, 11, 1)),
    ("seed", (0, 13, 0)),
    ("v0.14", (0, 14, 0)),
    ("v0.18", (0, 18, 0)),
    ("v0.19", (0, 19, 0)),
    ("v0.20", (0, 20, 0)),
    ("v0.21", (0, 21, 0)),
    ("v0.22", (0, 22, 0)),
    ("v0.23", (0, 23, 0)),
    ("v0.30", (0, 30, 0)),
    ("v0.33", (0, 33, 0)),
)
ERA_IDS: tuple[str, ...] = tuple(era for era, _ in ERA_FIRST_RELEASES)
# Era id -> the representative release the guide names for it.
ERA_RELEASES: dict[str, str] = {
    "v0.10": "0.10.0", "v0.11": "0.11.0", "pre-seed": "0.12.0", "seed": "0.13.0", "v0.14": "0.14.0",
    "v0.18": "0.18.0", "v0.19": "0.19.0", "v0.20": "0.20.0", "v0.21": "0.21.0", "v0.22": "0.22.0",
    "v0.23": "0.23.0", "v0.30": "0.30.0", "v0.33": "0.33.0",
}
_LAST_KNOWN_MINOR = (0, 33)
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


class EraSelectionError(ValueError):
    """A `--vllm-version` value that is neither a known era/profile nor a version in the known range."""


def era_for_version(version: str) -> str:
    """The era id whose releases include `version` (X.Y.Z between 0.10.0 and 0.33.x)."""
    match = _VERSION.match(version.strip())
    if not match:
        raise EraSelectionError(
            f"--vllm-version: {version!r} is not a version X.Y.Z; accepted: X.Y.Z in 0.10.0-0.33.x, "
            f"or one of {', '.join(ERA_IDS)}"
        )
    parts = tuple(int(p) for p in match.groups())
    if parts < ERA_FIRST_RELEASES[0][1] or parts[:2] > _LAST_KNOWN_MINOR:
        raise EraSelectionError(f"--vllm-version: {version} is outside the known range 0.10.0-0.33.x")
    chosen = ERA_IDS[0]
    for era, first in ERA_FIRST_RELEASES:
        if parts >= first:
            chosen = era
    return chosen


def select_eras(value: str | None) -> tuple[str, ...]:
    """Eras a run covers: all of them for None, else the one era a profile, era id or version names."""
    if value is None:
        return ERA_IDS
    value = value.strip()
    if value in ERA_IDS:
        return (value,)
    return (era_for_version(value),)
