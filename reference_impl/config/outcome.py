"""The outcome of a config case: one typed shape (`Outcome`), its JSON form, and how older JSON forms read.

A config target (the reference resolver, the `vllm` target, a `--hma-target`) answers a case with an outcome::

    {"id", "resolved_disable_hma": bool|null,
     "warnings": [{"id": message id|null, "text": str}, ...],
     "error": null | {"id": message id|null, "type", "stage", "text"},
     "rules": [str, ...], "unknown": null | reason, ["kv_cache_groups": [...]]}

Each message carries its id (`reference_impl.config.message_ids.identify`), given once where the target meets the
text (`OutcomeWarning.met`, `OutcomeError.met`); the report, `diff` and `explain` read the ids, the suites judge the
texts.
`Outcome.to_dict` writes that form and `Outcome.from_dict` reads it back. `from_dict` also reads the forms written
before (results files of schema 1 and 2, a `--hma-target` written against them): `warnings` a list of texts (with
their ids in `warning_ids` beside them, or none), the error's text under `message` (with or without its `id`); the
ids such a form lacks are given as the target would have (`upgrade` rewrites such a dict, or part of one, in place
of the older keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from reference_impl.config.message_ids import identify

#: the keys every outcome has (`kv_cache_groups` only where that stage ran)
KEYS = ("id", "resolved_disable_hma", "warnings", "error", "rules", "unknown")
#: the keys `from_dict` needs (the older form has them too)
_NEEDED = frozenset(("resolved_disable_hma", "warnings", "error", "unknown"))
#: the key an outcome of the older form kept its warnings' ids under, one per text
LEGACY_WARNING_IDS = "warning_ids"


class OutcomeShapeError(ValueError):
    """A value that is not a config outcome (of this form or an older one); the message names the field."""


@dataclass(frozen=True)
class OutcomeWarning:
    """A warning the target logged: its text, and the declared message it is (None: none of them)."""

    id: str | None
    text: str

    @classmethod
    def met(cls, text: str) -> "OutcomeWarning":
        """The warning `text` as a target meets it, with its id."""
        return cls(identify(text), text)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: {"id", "text"}."""
        return {"id": self.id, "text": self.text}


@dataclass(frozen=True)
class OutcomeError:
    """The error that ended a case: the exception's class name, the stage, its text and the declared message it
    is (None: none of them)."""

    id: str | None
    type: str
    stage: str
    text: str

    @classmethod
    def met(cls, type: str, stage: str, text: str) -> "OutcomeError":  # noqa: A002 - the schema's field name
        """An error as a target meets it (an empty AssertionError has an id too: `identify`)."""
        return cls(identify(text, type), type, stage, text)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: {"id", "type", "stage", "text"}."""
        return {"id": self.id, "type": self.type, "stage": self.stage, "text": self.text}


@dataclass(frozen=True)
class Outcome:
    """What a target does with one case (see the module docstring for the JSON form)."""

    id: Any = None
    #: the flag after resolution (False: HMA on); None with an error or an unknown outcome
    resolved_disable_hma: bool | None = None
    warnings: tuple[OutcomeWarning, ...] = ()
    error: OutcomeError | None = None
    #: how the target got there (the reference's rule ids, the vllm target's notes), in order
    rules: tuple[str, ...] = ()
    #: why the outcome cannot be known; None when it is
    unknown: str | None = None
    #: the KV cache groups, only where that stage ran
    kv_cache_groups: list | None = None

    @classmethod
    def met(cls, case_id: Any, resolved: bool | None = None, warnings: Iterable[str] = (),
            error: OutcomeError | None = None, rules: Iterable[str] = (), unknown: str | None = None,
            groups: list | None = None) -> "Outcome":
        """An outcome built where its target meets the warnings' texts (each given its id)."""
        return cls(case_id, resolved, tuple(OutcomeWarning.met(text) for text in warnings), error, tuple(rules),
                   unknown, groups)

    @property
    def warning_texts(self) -> tuple[str, ...]:
        """The warnings' texts, in the order they were logged."""
        return tuple(message.text for message in self.warnings)

    @property
    def warning_ids(self) -> tuple[str | None, ...]:
        """The warnings' ids, in the order they were logged."""
        return tuple(message.id for message in self.warnings)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form, keys in the schema's order."""
        result = {
            "id": self.id,
            "resolved_disable_hma": self.resolved_disable_hma,
            "warnings": [message.to_dict() for message in self.warnings],
            "error": None if self.error is None else self.error.to_dict(),
            "rules": list(self.rules),
            "unknown": self.unknown,
        }
        if self.kv_cache_groups is not None:
            result["kv_cache_groups"] = self.kv_cache_groups
        return result

    @classmethod
    def from_dict(cls, data: Any) -> "Outcome":
        """Read an outcome's JSON form, or an older one (module docstring); OutcomeShapeError for anything else."""
        if not isinstance(data, dict) or not _NEEDED <= data.keys():
            raise OutcomeShapeError(f"outcome: {type(data).__name__} is not accepted; expected an object with keys "
                                    f"{', '.join(KEYS)}")
        return cls(data.get("id"), data["resolved_disable_hma"],
                   _messages(data["warnings"], data.get(LEGACY_WARNING_IDS)), _error(data["error"]),
                   tuple(data.get("rules") or ()), data["unknown"], data.get("kv_cache_groups"))


def _messages(warnings: Any, legacy_ids: Any) -> tuple[OutcomeWarning, ...]:
    if warnings is None:
        return ()
    if not isinstance(warnings, (list, tuple)):
        raise OutcomeShapeError(f"outcome.warnings: {warnings!r} is not accepted; expected a list")
    found = []
    for index, warning in enumerate(warnings):
        if isinstance(warning, dict) and isinstance(warning.get("text"), str):
            found.append(OutcomeWarning(warning["id"], warning["text"]) if "id" in warning
                         else OutcomeWarning.met(warning["text"]))
        elif isinstance(warning, str):  # the older form: a text, its id in `warning_ids` or none
            given = legacy_ids[index] if isinstance(legacy_ids, list) and index < len(legacy_ids) else None
            found.append(OutcomeWarning(given, warning) if isinstance(legacy_ids, list)
                         else OutcomeWarning.met(warning))
        else:
            raise OutcomeShapeError(f"outcome.warnings[{index}]: {warning!r} is not accepted; expected "
                                    "{\"id\", \"text\"}")
    return tuple(found)


def _error(error: Any) -> OutcomeError | None:
    if error is None:
        return None
    if not isinstance(error, dict):
        raise OutcomeShapeError(f"outcome.error: {error!r} is not accepted; expected null or "
                                "{\"id\", \"type\", \"stage\", \"text\"}")
    # the older form kept the text under `message`; an error without its id is given one
    text = error["text"] if "text" in error else str(error.get("message") or "")
    if "id" in error:
        return OutcomeError(error["id"], error.get("type"), error.get("stage"), text)
    return OutcomeError.met(error.get("type"), error.get("stage"), text)


def is_legacy(data: Any) -> bool:
    """Whether `data` (an outcome, or the part of one a compacted results entry keeps) is in an older form, or
    lacks an id this form gives (a `--hma-target` that writes the messages without them)."""
    if not isinstance(data, dict):
        return False
    if LEGACY_WARNING_IDS in data:
        return True
    warnings, error = data.get("warnings"), data.get("error")
    return ((isinstance(warnings, list) and any(not isinstance(w, dict) or "id" not in w for w in warnings))
            or (isinstance(error, dict) and ("text" not in error or "id" not in error)))


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """`data` (an outcome or part of one, in an older form) rewritten in this form, key by key and in place: the
    warnings as {"id", "text"} (`warning_ids` consumed), the error's `message` as `text` with its `id`. Returns
    `data`; one already in this form is left as it is."""
    if not is_legacy(data):
        return data
    legacy_ids = data.get(LEGACY_WARNING_IDS)
    rewritten = {}
    for key, value in data.items():
        if key == LEGACY_WARNING_IDS:
            continue
        if key == "warnings" and isinstance(value, list):
            value = [message.to_dict() for message in _messages(value, legacy_ids)]
        elif key == "error" and isinstance(value, dict):
            value = _error(value).to_dict()
        rewritten[key] = value
    data.clear()
    data.update(rewritten)
    return data
