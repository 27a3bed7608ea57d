"""vLLM rule eras as the tables order them, with each era's representative release."""

from __future__ import annotations

# Era id -> representative vLLM release (the shared contract in the team guide), oldest first.
ERA_RELEASES: dict[str, str] = {
    "v0.10": "0.10.0",
    "v0.11": "0.11.0",
    "pre-seed": "0.12.0",
    "seed": "0.13.0",
    "v0.14": "0.14.0",
    "v0.18": "0.18.0",
    "v0.19": "0.19.0",
    "v0.20": "0.20.0",
    "v0.21": "0.21.0",
    "v0.22": "0.22.0",
    "v0.23": "0.23.0",
    "v0.30": "0.30.0",
    "v0.33": "0.33.0",
}
_ORDER = {era: index for index, era in enumerate(ERA_RELEASES)}


def era_sort_key(era: str) -> tuple[int, str]:
    """Known eras in release order; anything else after them, by name."""
    return (_ORDER.get(era, len(_ORDER)), era)


def era_title(era: str) -> str:
    """'seed (vLLM 0.13.0)' for a known era, the id itself otherwise."""
    release = ERA_RELEASES.get(era)
    return f"{era} (vLLM {release})" if release else era
