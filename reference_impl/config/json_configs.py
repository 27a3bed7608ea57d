"""vLLM's JSON-valued config flags that it validates while parsing: `--kv-transfer-config` (a
`KVTransferConfig`) and `--kv-events-config` (a `KVEventsConfig`).

vLLM 0.13.0 and 0.33.0 hand the option's text to pydantic (`TypeAdapter(cls).validate_json`; 0.33 first
expands bare human-readable numbers such as `2k`), so broken JSON, a value that is not an object and a field
of the wrong type all stop the command line with pydantic's own words. This module reproduces them without
pydantic: `syntax_error` says what pydantic's JSON parser (jiter) reports for text that is not JSON,
`field_errors` checks the object against the release's fields the way pydantic's lax mode does. Each error
is `(location, message)`; `render` puts them on one line as the vllm target reports a `ValidationError`
("1 validation error for KVTransferConfig: kv_port: Input should be a valid integer, unable to parse string
as an integer").

Field lists are vLLM's: 0.13.0's (unknown keys ignored) and 0.33.0's (unknown keys refused, pydantic
extra="forbid"); the eras between take 0.13.0's and those before it too, the releases this was checked
against being those two.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reference_impl.config import messages
from reference_impl.config.objects import KV_ROLES

_WHITESPACE = " \t\n\r"
_IDENTS = ("true", "false", "null", "NaN", "Infinity")


@dataclass(frozen=True)
class ConfigSchema:
    """One config class as a release validates it: field -> (kind, optional), whether unknown keys are
    refused, and the class's own `__post_init__` check once the fields pass (its message, or None; it is given
    the value and the release's refusal of a connector without a role, whose text changed in 0.11.1). Kinds:
    "str", "int", "float", "bool", "object", or a tuple of Literal choices."""

    title: str
    fields: dict[str, tuple[Any, bool]]
    forbid_extra: bool
    post_init: Callable[[dict, str], str | None] | None = None


def _kv_role_given(value: dict, missing_kv_role_error: str) -> str | None:
    """KVTransferConfig.__post_init__: a connector needs a role (refused in the release's own words)."""
    if value.get("kv_connector") is not None and value.get("kv_role") is None:
        return missing_kv_role_error
    return None


_TRANSFER_FIELDS_0_13 = {
    "kv_connector": ("str", True),
    "engine_id": ("str", True),
    "kv_buffer_device": ("str", False),
    "kv_buffer_size": ("float", False),
    "kv_role": (KV_ROLES, True),
    "kv_rank": ("int", True),
    "kv_parallel_size": ("int", False),
    "kv_ip": ("str", False),
    "kv_port": ("int", False),
    "kv_connector_extra_config": ("object", False),
    "kv_connector_module_path": ("str", True),
    "enable_permute_local_kv": ("bool", False),
    "kv_load_failure_policy": (("recompute", "fail"), False),
}
_TRANSFER_REMOVED_BY_0_33 = ("kv_buffer_size", "kv_rank", "kv_parallel_size", "kv_ip")
KV_TRANSFER_0_13 = ConfigSchema("KVTransferConfig", _TRANSFER_FIELDS_0_13, forbid_extra=False,
                                post_init=_kv_role_given)
KV_TRANSFER_0_33 = ConfigSchema("KVTransferConfig", {
    name: spec for name, spec in _TRANSFER_FIELDS_0_13.items() if name not in _TRANSFER_REMOVED_BY_0_33
}, forbid_extra=True, post_init=_kv_role_given)
_EVENTS_FIELDS = {
    "enable_kv_cache_events": ("bool", False),
    "publisher": (("null", "zmq"), False),
    "endpoint": ("str", False),
    "replay_endpoint": ("str", True),
    "buffer_steps": ("int", False),
    "hwm": ("int", False),
    "max_queue_size": ("int", False),
    "topic": ("str", False),
}
KV_EVENTS_0_13 = ConfigSchema("KVEventsConfig", _EVENTS_FIELDS, forbid_extra=False)
KV_EVENTS_0_33 = ConfigSchema("KVEventsConfig", _EVENTS_FIELDS, forbid_extra=True)


class _Invalid(Exception):
    def __init__(self, what: str, index: int):
        super().__init__(what)
        self.what, self.index = what, index


def _where(text: str, index: int) -> str:
    """jiter's position: the line of `index` and its column (a newline at `index` starts the next line, at 0)."""
    if index < 0:
        return "line 1 column 0"
    line = text.count("\n", 0, index + 1) + 1
    return f"line {line} column {index - text.rfind(chr(10), 0, index + 1)}"


class _Scanner:
    """A JSON syntax check that stops where jiter stops, with jiter's words."""

    def __init__(self, text: str):
        self.text, self.pos = text, 0

    def _skip(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _WHITESPACE:
            self.pos += 1

    def _eof(self, what: str) -> _Invalid:
        return _Invalid(f"EOF while parsing {what}", len(self.text) - 1)

    def _peek(self) -> str | None:
        return self.text[self.pos] if self.pos < len(self.text) else None

    def document(self) -> None:
        self.value()
        self._skip()
        if self.pos < len(self.text):
            raise _Invalid("trailing characters", self.pos)

    def value(self) -> None:
        self._skip()
        char = self._peek()
        if char is None:
            raise self._eof("a value")
        if char == "{":
            self._object()
        elif char == "[":
            self._list()
        elif char == '"':
            self._string()
        elif char == "-" or char.isdigit():
            self._number()
        elif char in "tfnNI":
            self._ident()
        else:
            raise _Invalid("expected value", self.pos)

    def _ident(self) -> None:
        start = self.pos
        for word in _IDENTS:
            if word[0] == self.text[start]:
                break
        for offset, want in enumerate(word):
            if start + offset >= len(self.text):
                raise self._eof("a value")
            if self.text[start + offset] != want:
                raise _Invalid("expected ident", start + offset)
        self.pos = start + len(word)

    def _digits(self) -> int:
        start = self.pos
        while self.pos < len(self.text) and self.text[self.pos].isdigit():
            self.pos += 1
        return self.pos - start

    def _number(self) -> None:
        if self._peek() == "-":
            self.pos += 1
            if self._peek() == "I":
                self._ident()
                return
        if self._peek() is None:
            raise self._eof("a value")
        if not self.text[self.pos].isdigit():
            raise _Invalid("invalid number", self.pos)
        if self.text[self.pos] == "0":
            self.pos += 1
            if self._peek() is not None and self.text[self.pos].isdigit():
                raise _Invalid("invalid number", self.pos)
        else:
            self._digits()
        if self._peek() == ".":
            self.pos += 1
            if self._peek() is None:
                raise self._eof("a value")
            if not self._digits():
                raise _Invalid("invalid number", self.pos)
        if self._peek() in ("e", "E"):
            self.pos += 1
            if self._peek() in ("+", "-"):
                self.pos += 1
            if self._peek() is None:
                raise self._eof("a value")
            if not self._digits():
                raise _Invalid("invalid number", self.pos)

    def _string(self) -> None:
        self.pos += 1  # the opening quote
        while True:
            char = self._peek()
            if char is None:
                raise self._eof("a string")
            if char == '"':
                self.pos += 1
                return
            if ord(char) < 0x20:
                raise _Invalid("control character (\\u0000-\\u001F) found while parsing a string", self.pos)
            if char == "\\":
                self.pos += 1
                escape = self._peek()
                if escape is None:
                    raise self._eof("a string")
                if escape == "u":
                    for _ in range(4):
                        self.pos += 1
                        if self._peek() is None:
                            raise self._eof("a string")
                        if self.text[self.pos] not in "0123456789abcdefABCDEF":
                            raise _Invalid("invalid escape", self.pos)
                elif escape not in '"\\/bfnrt':
                    raise _Invalid("invalid escape", self.pos)
            self.pos += 1

    def _object(self) -> None:
        self._container("}", "an object", self._entry)

    def _list(self) -> None:
        self._container("]", "a list", self.value)

    def _entry(self) -> None:
        """One `"key": value` of an object (the scanner stands on the key)."""
        if self._peek() != '"':
            raise _Invalid("key must be a string", self.pos)
        self._string()
        self._skip()
        if self._peek() is None:
            raise self._eof("an object")
        if self._peek() != ":":
            raise _Invalid("expected `:`", self.pos)
        self.pos += 1
        self.value()

    def _container(self, close: str, what: str, item) -> None:
        """An object or a list from its opening bracket: items separated by commas up to `close`."""
        self.pos += 1
        self._skip()
        if self._peek() is None:
            raise self._eof(what)
        if self._peek() == close:
            self.pos += 1
            return
        while True:
            item()
            self._skip()
            char = self._peek()
            if char is None:
                raise self._eof(what)
            if char == close:
                self.pos += 1
                return
            if char != ",":
                raise _Invalid(f"expected `,` or `{close}`", self.pos)
            self.pos += 1
            self._skip()
            if self._peek() is None:
                raise self._eof("a value")
            if self._peek() == close:
                raise _Invalid("trailing comma", self.pos)


def syntax_error(text: str) -> str | None:
    """What pydantic says of `text` when it is not JSON ("Invalid JSON: key must be a string at line 1
    column 2"), or None when it is."""
    try:
        _Scanner(text).document()
    except _Invalid as exc:
        return f"Invalid JSON: {exc.what} at {_where(text, exc.index)}"
    return None


# pydantic-core's integer text: an optional sign, or leading zeros then a minus ("0-5" is -5 to it)
_INT_TEXT = re.compile(r"(?:[+-]?|0+-)\d+(_\d+)*(\.0*)?")
_BOOL_TEXT = {"0": False, "off": False, "f": False, "false": False, "n": False, "no": False,
              "1": True, "on": True, "t": True, "true": True, "y": True, "yes": True}


def _float_text(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


def _field_error(kind, value: Any) -> str | None:
    """pydantic's lax-mode message for `value` (parsed from JSON) in a field of `kind`, or None if it fits."""
    if isinstance(kind, tuple):
        if value in kind and isinstance(value, str):
            return None
        quoted = [f"'{choice}'" for choice in kind]
        return f"Input should be {', '.join(quoted[:-1])} or {quoted[-1]}"
    if kind == "str":
        return None if isinstance(value, str) else "Input should be a valid string"
    if kind == "object":
        return None if isinstance(value, dict) else "Input should be an object"
    if kind == "bool":
        if isinstance(value, bool):
            return None
        whole = type(value) is int or (isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 63)
        if whole:
            return None if value in (0, 1) else "Input should be a valid boolean, unable to interpret input"
        if isinstance(value, float):
            return "Input should be a valid boolean"
        if isinstance(value, str):
            return None if value.strip().lower() in _BOOL_TEXT else "Input should be a valid boolean, unable to interpret input"
        return "Input should be a valid boolean"
    if kind == "int":
        if isinstance(value, bool) or type(value) is int:
            return None
        if isinstance(value, float):
            if not math.isfinite(value):
                return "Input should be a finite number"
            if abs(value) >= 2 ** 63:
                return "Unable to parse input string as an integer, exceeded maximum size"
            return None if value == int(value) else "Input should be a valid integer, got a number with a fractional part"
        if isinstance(value, str):
            return None if _INT_TEXT.fullmatch(value.strip()) else "Input should be a valid integer, unable to parse string as an integer"
        return "Input should be a valid integer"
    if kind == "float":
        if isinstance(value, (bool, int, float)):
            return None
        if isinstance(value, str):
            return None if _float_text(value) is not None else "Input should be a valid number, unable to parse string as a number"
        return "Input should be a valid number"
    raise ValueError(f"field kind {kind!r} is not known")


def field_errors(value: Any, schema: ConfigSchema) -> list[tuple[str, str]]:
    """pydantic's errors for a parsed value of `schema`: (location, message) in pydantic's order (the fields
    in declaration order, then unknown keys where the release forbids them)."""
    if not isinstance(value, dict):
        return [(schema.title, "Input should be an object")]
    errors = []
    for name, (kind, optional) in schema.fields.items():
        if name not in value or (optional and value[name] is None):
            continue
        message = _field_error(kind, value[name])
        if message is not None:
            errors.append((name, message))
    if schema.forbid_extra:
        errors += [(key, "Unexpected keyword argument") for key in value if key not in schema.fields]
    return errors


def render(errors: list[tuple[str, str]], title: str) -> str:
    """The errors on one line: "N validation error(s) for TITLE: loc: message; ..."."""
    count = len(errors)
    return (f"{count} validation error{'s' if count != 1 else ''} for {title}: "
            + "; ".join(f"{where}: {message}" for where, message in errors))


_HUMAN_NUMBER = re.compile(r"\b(\d+(?:\.\d+)?)([kKmMgGtT])\b")
_QUOTED = re.compile(r'("(?:[^"\\]|\\.)*")')
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


class HumanNumberError(ValueError):
    """A decimal with a binary suffix (`1.5K`), which vLLM 0.33 refuses."""


def expand_human_numbers(text: str) -> str:
    """vLLM 0.33's pass over the text before validation: bare `2k` becomes 2000, `1K` 1024 (never inside
    a JSON string)."""

    def number(match: re.Match) -> str:
        digits, suffix = match.groups()
        if suffix in _DECIMAL:
            return str(int(float(digits) * _DECIMAL[suffix]))
        if "." in digits:
            raise HumanNumberError(f"Decimals are not allowed with binary suffixes like {suffix}. "
                                   f"Did you mean to use {digits}{suffix.lower()} instead?")
        return str(int(digits) * _BINARY[suffix])

    parts = _QUOTED.split(text)
    return "".join(part if index % 2 else _HUMAN_NUMBER.sub(number, part) for index, part in enumerate(parts))
