"""The typed "not applicable" outcome of a check: a skip that carries why, as data, into the results file.

A check that does not apply ends with `not_applicable(kind, reason, ...)`: pytest's own skip, so pytest and
its console show and count it as ever, with the same one-line message, carrying its typed record
(`record_of`); the results plugin records that beside the entry (`"not_applicable": {"kind", "reason", "release", "refuses"}`), and
the report reads that record, never the message. An entry with it has the status "not applicable"
(`harness.results_model.status_of`).

Kinds (`KINDS`): what makes the check not apply. `profile`, `declaration`, `release` and `engine` follow from
the connector, its release or the engine: a MUST check that ends so still decided. `feature` (the connector
lacks an optional backdoor or feature the check needs) does not: a MUST cell that ends so decided nothing.
"""

from __future__ import annotations

from typing import Any, NoReturn

import pytest

from harness.kv_engine import VLLM_ENGINE_NA_PREFIX

KINDS = {
    "profile": "the connector's profile or configuration (its kind, its store scope, a refusal by design, a layout "
               "only another target builds)",
    "declaration": "what the connector class declares (SupportsHMA)",
    "release": "the release under test lacks the API the check needs",
    "engine": "the engine driving the connector cannot express the check's scenario",
    "feature": "the connector lacks something optional the check needs (a backdoor, KV events, the model it runs on)",
}
#: The kinds a connector's profile, class or release implies: a MUST check ended by one of these decided.
IMPLIED_KINDS = ("profile", "declaration", "release", "engine")
#: What a refusal names (`refuses`): the connector, though it declares HMA, refuses several KV cache groups.
MULTI_GROUP = "multi_group"
#: The key of an entry's record in the results file, and the attribute a report carries it in (from an xdist
#: worker too).
RECORD_KEY = "not_applicable"
REPORT_ATTR = "kvconform_not_applicable"

# The skip message of each kind: the wording the console and the results' `message` have always shown.
_NA_PREFIX = "N/A: "
_NOT_HMA_CAPABLE = "not HMA-capable: "
_FEATURE = "not applicable: "
#: What a multi-group refusal says of the connector (the report's HMA verdict: "it refuses ...").
REFUSES_MULTI_GROUP = "refuses multi-group models on this configuration: "
MULTI_GROUP_REFUSAL = "declares SupportsHMA, " + REFUSES_MULTI_GROUP


def not_applicable_skip(kind: str, reason: str, release: str | None = None,
                        refuses: str | None = None) -> BaseException:
    """The skip to raise for a check that does not apply: `kind` (one of `KINDS`), `reason` (the text, without
    the kind's wording), `release` (the release that lacks the API, for kind `release`), `refuses`
    (`MULTI_GROUP` for a connector that declares HMA but refuses several groups on this configuration by
    design). It is pytest's own skip (shown and counted as one) carrying its record."""
    if kind not in KINDS:
        raise ValueError(f"not applicable: kind {kind!r} is not one of {', '.join(KINDS)}")
    skip = pytest.skip.Exception(msg=message_of(kind, reason, release, refuses))
    setattr(skip, REPORT_ATTR, {"kind": kind, "reason": reason, "release": release, "refuses": refuses})
    return skip


def record_of(exc: BaseException) -> dict[str, Any] | None:
    """The typed record a skip raised by `not_applicable` carries (what the results file keeps), else None."""
    return getattr(exc, REPORT_ATTR, None) if isinstance(exc, pytest.skip.Exception) else None


def message_of(kind: str, reason: str, release: str | None = None, refuses: str | None = None) -> str:
    """The one-line skip message of a typed N/A (what the console and the results' `message` show)."""
    if kind == "release":
        return f"N/A on {release}: {reason}"
    if kind == "engine":
        return _NA_PREFIX + VLLM_ENGINE_NA_PREFIX + reason
    if kind == "declaration":
        return _NOT_HMA_CAPABLE + reason
    if kind == "feature":
        return _FEATURE + reason
    return _NA_PREFIX + (MULTI_GROUP_REFUSAL if refuses == MULTI_GROUP else "") + reason


def not_applicable(kind: str, reason: str, *, release: str | None = None, refuses: str | None = None) -> NoReturn:
    """End the running check as not applicable (see the module docstring)."""
    raise not_applicable_skip(kind, reason, release, refuses)


def decided_nothing(tier: str, status: str, record: dict[str, Any] | None) -> bool:
    """Whether a check's cell is vacuous: a MUST check that skipped for a reason the connector's profile, class,
    release or engine does not imply ("inconclusive: ...", a missing backdoor, a hook given up on after a hang);
    `record` is the entry's `not_applicable` record (None for a plain skip)."""
    return tier == "MUST" and status == "skipped" and not (record and record.get("kind") in IMPLIED_KINDS)


def is_not_applicable(tier: str, status: str, record: dict[str, Any] | None) -> bool:
    """Whether a check's cell is not applicable: a typed N/A skip that still decided (any N/A of a SHOULD check,
    which may need a backdoor; a MUST check's N/A only of a kind its connector, release or engine implies)."""
    return status == "skipped" and record is not None and not decided_nothing(tier, status, record)


def legacy_record(message: str | None, suite: str | None) -> dict[str, Any] | None:
    """The typed record of a skip from a results file written before skips carried one (schema 1), read back
    from its message's wording (`message_of`'s, as it was): the one place that wording is parsed. None for a
    skip of no N/A kind; "not applicable: ..." is the connector suite's `feature` kind there only."""
    text = message or ""
    kind, release, refuses = None, None, None
    if text.startswith(_NA_PREFIX + VLLM_ENGINE_NA_PREFIX):
        kind, reason = "engine", text[len(_NA_PREFIX + VLLM_ENGINE_NA_PREFIX):]
    elif text.startswith(_NA_PREFIX + MULTI_GROUP_REFUSAL):
        kind, reason, refuses = "profile", text[len(_NA_PREFIX + MULTI_GROUP_REFUSAL):], MULTI_GROUP
    elif text.startswith(_NA_PREFIX):
        kind, reason = "profile", text[len(_NA_PREFIX):]
    elif text.startswith("N/A on ") and ": " in text:
        kind = "release"
        release, _, reason = text[len("N/A on "):].partition(": ")
    elif text.lower().startswith(_NOT_HMA_CAPABLE.rstrip(": ").lower()):
        kind, reason = "declaration", text[len(_NOT_HMA_CAPABLE):]
    elif suite == "connector" and text.lower().startswith(_FEATURE.rstrip(": ")):
        kind, reason = "feature", text.partition(": ")[2]
    else:
        return None
    return {"kind": kind, "reason": reason, "release": release, "refuses": refuses}
