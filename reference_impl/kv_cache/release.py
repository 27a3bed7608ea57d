"""Which vLLM release's `v1/core` the reference allocator follows where two releases differ.

The reference follows the newest release it knows. A few observable shapes changed between releases in
ways one object cannot serve at once: vLLM 0.34's prefix-cache map holds block ids (`_cache` maps a key
to one block id, `_dup_ids` keeps the keys several blocks share), 0.33's held the blocks themselves (a
key maps to a block, or to `{block_id: block}` once a second block shared it, and stays a dict). Code
written against an older release (its own tests, an out-of-tree scheduler) selects that release with
$KVCONFORM_ALLOCATOR_RELEASE (`0.33`, `0.33.0` or `v0.33`); `harness.upstream` sets it to the release
whose tests it runs. HiSparse's host pool is the other: 0.34 reserves, against later admissions, the host
pages an admitted asynchronous import has yet to allocate, 0.33 admitted an import when its own prompt's
pages fit. Every other behaviour is the same on every supported release.
"""

from __future__ import annotations

import os

__all__ = ["NEWEST", "OLDEST", "ENV_VAR", "allocator_release", "parse_release"]

#: The newest release whose `v1/core` the reference follows (the default).
NEWEST = (0, 34)
#: The oldest release the reference can present itself as.
OLDEST = (0, 13)
ENV_VAR = "KVCONFORM_ALLOCATOR_RELEASE"


def parse_release(text: str, field: str = ENV_VAR) -> tuple[int, int]:
    """`(major, minor)` of a release written `0.33`, `0.33.0` or `v0.33`; ValueError naming `field`."""
    raw = text.strip()
    parts = raw[1:].split(".") if raw[:1] in ("v", "V") else raw.split(".")
    if len(parts) in (2, 3) and all(p.isdigit() for p in parts):
        release = (int(parts[0]), int(parts[1]))
        if OLDEST <= release:
            return min(release, NEWEST)
    raise ValueError(f"{field}: {text!r} is not a vLLM release the reference follows "
                     f"(accepted: X.Y or X.Y.Z from {OLDEST[0]}.{OLDEST[1]}; newer ones get "
                     f"{NEWEST[0]}.{NEWEST[1]}'s behaviour)")


def allocator_release() -> tuple[int, int]:
    """The release selected by $KVCONFORM_ALLOCATOR_RELEASE, else NEWEST (read at each pool's construction)."""
    text = os.environ.get(ENV_VAR)
    return NEWEST if not text else parse_release(text)
