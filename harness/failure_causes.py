"""The root cause a failing connector check records beside its message: a machine-readable key.

A connector check's failure message is for people; its record also keeps `extra["cause"]`, a structured key the
findings page of vLLM's connectors (`harness.report.vllm_findings`) classifies by, with the check id and the
preset of the cell, never by the message's words. The key is emitted where the failure is raised:

* `{"tag": <a name of CAUSES>}` by a check's expectation that names its cause (`suites.connector.context.expect`
  with `cause=`),
* `{"tag": "expectation", "site": "<module>.<function>"}` by one that names none: the function that holds the
  failing expectation, a key that code moves can change but words cannot,
* `{"tag": "hook-raised", "hook", "role", "exception"}` when a connector hook raised (the guard of
  `suites.connector.runner` knows the hook, the role and the exception's class), with `"tensor": <a name of
  TENSOR_ERRORS>` where torch refused a copy of KV (`hook_raised`): a load of another dtype's bytes and a load of
  a shorter file raise the same RuntimeError from the same hook, and are two defects,
* `{"tag": "key-leak", "components": [...]}` when a lookup hit objects stored under another key
  (`harness.key_components`),
* `{"tag": "raised", "exception", "module"}` when code outside the checks raised outside any hook (the
  innermost module names where),
* `{"tag": "no-progress", "hook", "kind"}`, `{"tag": "timed-out", "hook"}`, `{"tag": "connector-load"}`.
"""

from __future__ import annotations

import re

#: The attribute a failing report of a connector check carries its cause key in (from an xdist worker too): the
#: console groups failures by it before the record (attached at teardown) exists.
REPORT_ATTR = "kvconform_cause"
#: The attribute a failing report of a connector check carries its (check id, preset) in, for the same reason: the
#: console names the check that failed from it, not from the message's "C16 [preset]: ".
CHECK_REPORT_ATTR = "kvconform_check"

# tag -> what it means; reviewed vocabulary (a check emitting another tag is an error in the check).
CAUSES = {
    "expectation": "a check's expectation failed (the key names the function that holds it)",
    "hook-raised": "a connector hook raised an exception",
    "connector-load": "the connector class does not load",
    "raised": "code the check called raised outside any connector hook (a constructor, vLLM's engine or scheduler)",
    "no-progress": "the engine made no progress for the bounded number of steps",
    "timed-out": "the check ran out of time",
    "key-leak": "a lookup hit objects stored under another key (cache salt, LoRA adapter, model, dtype, TP)",
    "wrong-kv": "the model read KV other than the KV stored for its tokens",
    "no-hit": "the connector reported no hit for a prompt it had just stored",
    "never-loaded": "a stored prompt's hit was never loaded",
    "evicted-at-once": "a prompt no longer hits right after it was stored",
    "isolation-vacuous": "the same cache salt got no hit, so an isolation check cannot judge",
    "hit-not-mamba-aligned": "a hit does not end on a Mamba state boundary",
    "exact-multiple-short": "a prompt whose length is an exact multiple of the block was stored short",
    "local-hit-overwritten": "the load wrote a block of the request's local prefix-cache hit",
    "null-block-written": "the null block was written",
}


# What torch says when it refuses to copy KV into the cache (`index_put_`, `copy_`), by a fragment of its text
# (torch 2.x; reviewed against its errors): the kind is given where the exception is met, once (`hook_raised`), so
# the records, never the messages, tell a wrong dtype from a wrong shape.
TENSOR_ERRORS = {
    "dtype-mismatch": re.compile(r"dtypes match|dtype mismatch|expected (?:both|all) .*same dtype", re.I),
    "shape-mismatch": re.compile(r"shape mismatch|cannot be broadcast|must match the size of tensor", re.I),
}


class FailureCauseError(ValueError):
    """A cause key with a tag outside CAUSES."""


def cause_record(tag: str, **details) -> dict:
    """The record `{"tag": tag, **details}`; FailureCauseError for a tag that is not in CAUSES."""
    if tag not in CAUSES:
        raise FailureCauseError(f"failure cause tag {tag!r} is not accepted; accepted: {', '.join(CAUSES)}")
    return {"tag": tag, **details}


#: Fields a tag's record gained after results files were written with it (`tensor`: 2026-12-06): a record without
#: one says nothing about it, so two runs compare on such a field only where both recorded it (`unrecorded_in_one`).
LATER_FIELDS = ("tensor",)


def unrecorded_in_one(a: dict, b: dict) -> frozenset[str]:
    """The fields of `LATER_FIELDS` one of two cause records has and the other lacks (written before it existed)."""
    return frozenset(name for name in LATER_FIELDS if (name in a) != (name in b))


def hook_raised(hook: str, role: str, exc: BaseException) -> dict:
    """The cause key of a connector hook that raised `exc`: the hook, the role and the exception's class, and where
    torch refused a copy of KV, which refusal (`TENSOR_ERRORS`: a wrong dtype, a wrong shape)."""
    record = cause_record("hook-raised", hook=hook, role=role, exception=type(exc).__name__)
    tensor = next((kind for kind, said in TENSOR_ERRORS.items() if said.search(str(exc))), None)
    if tensor is not None:
        record["tensor"] = tensor
    return record


def cause_of(entry: dict) -> dict:
    """The cause key a results entry recorded ({} when it has none: a record written before checks kept it)."""
    cause = (entry.get("extra") or {}).get("cause")
    return dict(cause) if isinstance(cause, dict) else {}
