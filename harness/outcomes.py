"""The typed skips of a check: "not applicable", and the other causes of a skip, each carrying why, as data,
into the results file.

A check that does not apply ends with `not_applicable(kind, reason, ...)`: pytest's own skip, so pytest and
its console show and count it as ever, with the same one-line message, carrying its typed record
(`record_of`); the results plugin records that beside the entry (`"not_applicable": {"kind", "reason", "release",
"refuses", "check", "preset"}`), and the report reads that record, never the message. An entry with it has the
status "not applicable" (`harness.results_model.status_of`). `check` and `preset` are the check id and the
multi-group preset the message names around the reason, kept apart so that one reason reads the same for
every check and preset it holds for.

A test skipped for another cause ends with `skip_because(kind, reason, ...)` (`cannot_run_here`, `inconclusive`):
the same kind of skip, whose record (`"skip_cause": {"kind", "reason", "needs", "packages"}`, `SKIP_KINDS`) the
report reads instead of the message's wording; the entry stays "skipped".

Kinds (`KINDS`): what makes the check not apply. `profile`, `declaration`, `release` and `engine` follow from
the connector, its release or the engine: a MUST check that ends so still decided. `feature` (the connector
lacks an optional backdoor or feature the check needs) does not: a MUST cell that ends so decided nothing.
"""

from __future__ import annotations

import json

from typing import Any, NoReturn

import pytest

from harness.kv_engine import VLLM_ENGINE_NA_PREFIX

KINDS = {
    "profile": "the connector's profile or configuration (its kind, its store scope, a refusal by design, a layout "
               "only another target builds)",
    "declaration": "what the connector class declares (SupportsHMA)",
    "release": "the release under test lacks the API the check needs",
    "engine": "the engine driving the connector cannot express the check's scenario",
    "feature": "the connector (or allocator target) lacks something optional the check needs (a backdoor, KV events, "
               "the model it runs on, a module or capability of a third-party target)",
}
#: The causes of a skip that is not "not applicable" (`skip_because`): nothing was decided.
SKIP_KINDS = {
    "cannot-run-here": "this machine lacks what the test needs (`needs`: a package that imports, `packages` naming "
                       "them; a CUDA device; a process of its own)",
    "inconclusive": "the check ran, but the scenario it judges did not occur (or did not answer), so it decided "
                    "nothing",
}
#: What a test that cannot run here lacks (a cause's `needs`).
NEEDS = ("package", "cuda", "process")
#: The kinds a connector's profile, class or release implies: a MUST check ended by one of these decided.
IMPLIED_KINDS = ("profile", "declaration", "release", "engine")
#: What a refusal names (`refuses`): the connector, though it declares HMA, refuses several KV cache groups.
MULTI_GROUP = "multi_group"
#: The key of an entry's record in the results file, and the attribute a report carries it in (from an xdist
#: worker too).
RECORD_KEY = "not_applicable"
REPORT_ATTR = "kvconform_not_applicable"
#: The attribute a report carries a skip's other cause in (the results file's `skip_cause`).
SKIP_CAUSE_ATTR = "kvconform_skip_cause"
#: The attribute a skip, and its report, name the class of the connector a `declaration` N/A concerns in (the
#: console folds one class's "not HMA-capable" cells into one line by it). Not part of the record: the results
#: file names the connector in the entry's cell.
CONNECTOR_CLASS_ATTR = "kvconform_connector_class"

# The skip message of each kind: the wording the console and the results' `message` have always shown.
_NA_PREFIX = "N/A: "
_NOT_HMA_CAPABLE = "not HMA-capable: "
_FEATURE = "not applicable: "
_CANNOT_RUN_HERE = "cannot run here: "
_INCONCLUSIVE = "inconclusive: "
#: How a message names the multi-group preset a declaration N/A happened on (the record's `preset`).
_ON_PRESET = " on the multi-group preset "
#: What a multi-group refusal says of the connector (the report's HMA verdict: "it refuses ...").
REFUSES_MULTI_GROUP = "refuses multi-group models on this configuration: "
MULTI_GROUP_REFUSAL = "declares SupportsHMA, " + REFUSES_MULTI_GROUP


def not_applicable_skip(kind: str, reason: str, release: str | None = None, refuses: str | None = None, *,
                        check: str | None = None, preset: str | None = None,
                        connector_class: str | None = None) -> BaseException:
    """The skip to raise for a check that does not apply: `kind` (one of `KINDS`), `reason` (the text, without
    the kind's wording), `release` (the release that lacks the API, for kind `release`), `refuses`
    (`MULTI_GROUP` for a connector that declares HMA but refuses several groups on this configuration by
    design), `check` (the check id the message names before the reason), `preset` (the multi-group preset it
    names after it). It is pytest's own skip (shown and counted as one) carrying its record, and
    `connector_class` (the name of the class a `declaration` N/A concerns) beside it (`connector_class_of`)."""
    record = not_applicable_record(kind, reason, release, refuses, check=check, preset=preset)
    skip = pytest.skip.Exception(msg=message_of(**record))
    setattr(skip, REPORT_ATTR, record)
    if connector_class is not None:
        setattr(skip, CONNECTOR_CLASS_ATTR, connector_class)
    return skip


def not_applicable_record(kind: str, reason: str, release: str | None = None, refuses: str | None = None, *,
                          check: str | None = None, preset: str | None = None) -> dict[str, Any]:
    """The record of a check that does not apply (`not_applicable_skip` says what each field is)."""
    if kind not in KINDS:
        raise ValueError(f"not applicable: kind {kind!r} is not one of {', '.join(KINDS)}")
    return {"kind": kind, "reason": reason, "release": release, "refuses": refuses, "check": check, "preset": preset}


def skip_cause(kind: str, reason: str, *, needs: str | None = None, packages: tuple[str, ...] | list[str] = ()
               ) -> dict[str, Any]:
    """The record of a skip that is not "not applicable": `kind` (one of `SKIP_KINDS`), `reason` (the text,
    without the kind's wording), `needs` (for `cannot-run-here`: one of `NEEDS`) and `packages` (the packages
    that do not import, for `needs="package"`)."""
    if kind not in SKIP_KINDS:
        raise ValueError(f"skip cause: kind {kind!r} is not one of {', '.join(SKIP_KINDS)}")
    if kind == "cannot-run-here" and needs not in NEEDS:
        raise ValueError(f"skip cause: needs {needs!r} is not one of {', '.join(NEEDS)}")
    return {"kind": kind, "reason": reason, "needs": needs, "packages": list(packages)}


def skip_for(record: dict[str, Any]) -> BaseException:
    """The skip to raise for a typed record: a not-applicable one (kind among `KINDS`) or a skip cause."""
    if record["kind"] in KINDS:
        return not_applicable_skip(**record)
    skip = pytest.skip.Exception(msg=skip_message_of(record))
    setattr(skip, SKIP_CAUSE_ATTR, dict(record))
    return skip


def skip_because(kind: str, reason: str, *, needs: str | None = None,
                 packages: tuple[str, ...] | list[str] = ()) -> NoReturn:
    """End the running test as skipped for a cause that is not "not applicable" (see `skip_cause`)."""
    raise skip_for(skip_cause(kind, reason, needs=needs, packages=packages))


def cannot_run_here(reason: str, *, needs: str, packages: tuple[str, ...] | list[str] = ()) -> NoReturn:
    """End the running test as one this machine cannot run ("cannot run here: reason"): `needs` what it lacks."""
    skip_because("cannot-run-here", reason, needs=needs, packages=packages)


def inconclusive(reason: str) -> NoReturn:
    """End the running check as inconclusive ("inconclusive: reason"): the scenario it judges did not occur."""
    skip_because("inconclusive", reason)


def skip_message_of(record: dict[str, Any]) -> str:
    """The one-line message of a skip cause (what the console and the results' `message` show)."""
    return (_CANNOT_RUN_HERE if record["kind"] == "cannot-run-here" else _INCONCLUSIVE) + record["reason"]


def skip_cause_of(exc: BaseException) -> dict[str, Any] | None:
    """The skip cause a skip raised by `skip_because` carries, else None."""
    return getattr(exc, SKIP_CAUSE_ATTR, None) if isinstance(exc, pytest.skip.Exception) else None


def connector_class_of(exc: BaseException) -> str | None:
    """The connector class a skip raised by `not_applicable(..., connector_class=...)` names, else None."""
    return getattr(exc, CONNECTOR_CLASS_ATTR, None) if isinstance(exc, pytest.skip.Exception) else None


def record_of(exc: BaseException) -> dict[str, Any] | None:
    """The typed record a skip raised by `not_applicable` carries (what the results file keeps), else None."""
    return getattr(exc, REPORT_ATTR, None) if isinstance(exc, pytest.skip.Exception) else None


def message_of(kind: str, reason: str, release: str | None = None, refuses: str | None = None,
               check: str | None = None, preset: str | None = None) -> str:
    """The one-line skip message of a typed N/A (what the console and the results' `message` show); without
    `check` and `preset`, the reason as it reads for every check and preset it holds for."""
    reason = (f"{check} " if check else "") + reason + (_ON_PRESET + preset if preset else "")
    if kind == "release":
        return f"N/A on {release}: {reason}"
    if kind == "engine":
        return _NA_PREFIX + VLLM_ENGINE_NA_PREFIX + reason
    if kind == "declaration":
        return _NOT_HMA_CAPABLE + reason
    if kind == "feature":
        return _FEATURE + reason
    return _NA_PREFIX + (MULTI_GROUP_REFUSAL if refuses == MULTI_GROUP else "") + reason


def message_for_any_cell(record: dict[str, Any]) -> str:
    """A not-applicable record's message as it reads for every check and preset it holds for (without its
    `check` and `preset`): what groups one reason's cells."""
    return message_of(record["kind"], record["reason"], record.get("release"), record.get("refuses"))


#: The fields of a not-applicable record that say where it was met, not why.
_WHERE_MET = ("check", "preset", "release")


def skip_reason_key(record: dict[str, Any] | None, cause: dict[str, Any] | None) -> str | None:
    """What puts skips together as one reason in a summary (the console's skip line, a verdict's most common skip):
    a not-applicable `record` without where it was met (its check, preset and release), else a skip's `cause`
    record; None for a skip that carries neither (its words are all it has)."""
    if isinstance(record, dict):
        return json.dumps({"not_applicable": {k: v for k, v in record.items() if k not in _WHERE_MET}}, sort_keys=True)
    if isinstance(cause, dict):
        return json.dumps({"skip_cause": cause}, sort_keys=True)
    return None


def not_applicable(kind: str, reason: str, *, release: str | None = None, refuses: str | None = None,
                   check: str | None = None, preset: str | None = None, connector_class: str | None = None) -> NoReturn:
    """End the running check as not applicable (see the module docstring and `not_applicable_skip`)."""
    raise not_applicable_skip(kind, reason, release, refuses, check=check, preset=preset,
                              connector_class=connector_class)


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
    return legacy_fields({"kind": kind, "reason": reason, "release": release, "refuses": refuses})


def legacy_fields(record: dict[str, Any]) -> dict[str, Any]:
    """A not-applicable record written before records kept `check` and `preset` apart (schemas 1 and 2), with
    them taken out of its reason, where `message_of` had put them: the check id before the reason, the
    multi-group preset after it."""
    if "check" in record and "preset" in record:
        return record
    reason, check, preset = record["reason"], None, None
    head, _, rest = reason.partition(" ")
    if len(head) == 3 and head[0] == "C" and head[1:].isdigit() and rest:
        # A reason of then named its check again further on ("... (C37 then puts it ...)"), as none does now.
        check, reason = head, rest.replace(f"{head} ", "")
    before, on, after = reason.rpartition(_ON_PRESET)
    if on and after and " " not in after:
        reason, preset = before, after
    return {**record, "reason": reason, "check": check, "preset": preset}


def legacy_skip_cause(message: str | None, suite: str | None) -> dict[str, Any] | None:
    """The skip cause of a skip from a results file written before skips carried one (schemas 1 and 2), read
    back from its message's wording (`skip_message_of`'s, and the benchmarks' "not applicable: vLLM is not
    importable ..." before it): the one place that wording is parsed. None for a skip of no such cause."""
    text = message or ""
    if text.startswith(_INCONCLUSIVE):
        return skip_cause("inconclusive", text[len(_INCONCLUSIVE):])
    if text.startswith(_CANNOT_RUN_HERE):
        reason = text[len(_CANNOT_RUN_HERE):]
        needs = "cuda" if " needs CUDA" in reason else "process" if " test process shared" in reason else "package"
        return skip_cause("cannot-run-here", reason, needs=needs)
    if suite == "benchmark" and text.startswith(_FEATURE + "vLLM is not importable"):
        return skip_cause("cannot-run-here", text[len(_FEATURE):], needs="package", packages=["vllm"])
    return None
