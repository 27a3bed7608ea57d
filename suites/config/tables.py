"""Loading the reviewed decision tables in `tables/`: one TOML file per era plus the message texts.

An era file names the era it `extends` and lists only what the spec's timeline changes; loading merges
the chain so every era reads as one complete table.
"""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path
from typing import Any

TABLES_DIR = Path(__file__).with_name("tables")


def _read(name: str) -> dict[str, Any]:
    with open(TABLES_DIR / f"{name}.toml", "rb") as handle:
        return tomllib.load(handle)


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


@functools.cache
def era_table(era: str) -> dict[str, Any]:
    """The complete decision table of `era` (its file merged over the chain it extends)."""
    if not (TABLES_DIR / f"{era}.toml").is_file():
        raise KeyError(f"no decision table for era {era!r} in {TABLES_DIR}")
    own = _read(era)
    parent = own.get("extends")
    table = _merge(era_table(parent), own) if parent else own
    table = dict(table)
    table.pop("extends", None)
    removed = set(own.get("removed", {}).get("connectors", ()))
    table["connectors"] = {name: hma for name, hma in table["connectors"].items() if name not in removed}
    table.pop("removed", None)
    return table


@functools.cache
def messages() -> dict[str, dict[str, str]]:
    """Message id -> {"kind", "text"[, "type"]}: every text the suite asserts on."""
    return _read("messages")


def message_text(message_id: str, **fields: str) -> str:
    """The exact text of a message, with `{name}` and friends filled in."""
    return messages()[message_id]["text"].format(**fields)
