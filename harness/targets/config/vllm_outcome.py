"""Turning what a real vLLM does into the outcome schema: its exceptions and its in-scope warnings.

Config-time errors reach the caller of `VllmConfig(...)` wrapped in pydantic's `ValidationError`; the
outcome reports the exception as vLLM's code raised it (the class inside the wrapper, and the text after
"Value error, "). Warnings are WARNING-or-higher records of the `vllm` logger tree, in order, limited to
those the HMA resolution itself emits (config-rules.md 10.6): records logged from the HMA block of
`VllmConfig.__post_init__`, from the KV-cache spec unification/promotion, and from the connector
factory's creation check. Other warnings vLLM logs while building a config are out of scope.
"""

from __future__ import annotations

import inspect
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from reference_impl.config.outcome import OutcomeError

# Functions whose own warnings belong to the HMA resolution wherever they live.
_IN_SCOPE_FUNCTIONS = frozenset({"unify_hybrid_kv_cache_specs", "_promote_local_kv_cache_specs", "create_connector"})
# The marker that every era's HMA block of VllmConfig.__post_init__ mentions on its first and last lines.
_HMA_MARKER = "hybrid_kv_cache_manager"


@dataclass(frozen=True)
class HmaBlock:
    """Where the HMA block of the installed `VllmConfig.__post_init__` is: file and line range."""

    path: str
    first: int
    last: int

    @classmethod
    def locate(cls) -> "HmaBlock":
        """Find the block: from the first to the last line of `__post_init__` naming the flag, + the statement's tail."""
        from vllm.config import VllmConfig

        func = VllmConfig.__post_init__
        lines, start = inspect.getsourcelines(func)
        marked = [start + i for i, text in enumerate(lines) if _HMA_MARKER in text]
        last = marked[-1]
        # A raise/log that follows the last mention (the HiSparse gate's message) ends at the next blank line.
        while last - start + 1 < len(lines) and lines[last - start + 1].strip():
            last += 1
        return cls(inspect.getsourcefile(func) or "", marked[0], last)

    def contains(self, record: logging.LogRecord) -> bool:
        """Whether a log record was emitted from inside this block."""
        return record.pathname == self.path and self.first <= record.lineno <= self.last


@dataclass
class WarningCapture(logging.Handler):
    """A handler on the `vllm` logger that keeps in-scope WARNING+ messages in the order they were logged."""

    block: HmaBlock
    messages: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        logging.Handler.__init__(self, level=logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:  # noqa: D102 - logging hook
        if self.block.contains(record) or record.funcName in _IN_SCOPE_FUNCTIONS:
            self.messages.append(record.getMessage())

    __hash__ = logging.Handler.__hash__


@contextmanager
def captured_warnings(block: HmaBlock) -> Iterator[list[str]]:
    """Collect in-scope vLLM warnings while the body runs; yields the (growing) list of messages."""
    logger = logging.getLogger("vllm")
    handler = WarningCapture(block)
    old_level = logger.level
    logger.addHandler(handler)
    if logger.level == logging.NOTSET or logger.level > logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        yield handler.messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def unwrap_exception(exc: BaseException) -> BaseException:
    """The exception vLLM's code raised, taken out of pydantic's ValidationError wrapper(s)."""
    seen = 0
    while type(exc).__name__ == "ValidationError" and hasattr(exc, "errors") and seen < 8:
        seen += 1
        try:
            details = exc.errors()
        except Exception:
            break
        inner = details[0].get("ctx", {}).get("error") if details else None
        if not isinstance(inner, BaseException):
            break
        exc = inner
    return exc


# The suite's fixture connectors -> their twins built on vLLM's own base classes. vLLM loads the twin; its
# messages name the case's module again, so outcomes stay comparable with other targets.
EXTERNAL_TWINS = {"suites.config.external_connectors": "harness.targets.config.vllm_external_connectors"}


def error_of(exc: BaseException, stage: str) -> OutcomeError:
    """The outcome's error for an exception raised at `stage`, with its id (the text met here)."""
    inner = unwrap_exception(exc)
    if isinstance(inner, BaseException) and inner is not exc:
        message = str(inner)
    else:
        message = _pydantic_own(exc) or _after_value_error(str(exc))
    for original, twin in EXTERNAL_TWINS.items():
        message = message.replace(twin, original)
    return OutcomeError.met(type(inner).__name__, stage, message)


def argparse_message(exc: BaseException, printed: str) -> str:
    """argparse's one-line error for a rejected option value; when the value failed pydantic validation
    (vLLM validates JSON config flags while parsing), the validation error on one line after the option,
    as `error_of` renders it, instead of the first line of pydantic's multi-line text."""
    seen: set[int] = set()
    cause = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if type(cause).__name__ == "ValidationError" and hasattr(cause, "errors"):
            option = printed.split(": ", 1)[0] if printed.startswith("argument ") else ""
            text = error_of(cause, "cli_parse").text
            return f"{option}: {text}" if option else text
        cause = cause.__cause__ or cause.__context__
    return printed


def _pydantic_own(exc: BaseException) -> str | None:
    """A ValidationError pydantic raised itself (a field's type check, e.g. a kv_role outside the Literal),
    on one line without the pydantic version's help URL: "1 validation error for KVTransferConfig: kv_role:
    Input should be ..."; None for anything else."""
    if type(exc).__name__ != "ValidationError" or not hasattr(exc, "errors"):
        return None
    try:
        details = exc.errors()
        title = exc.title
    except Exception:
        return None
    if not details or any(d.get("type") in ("value_error", "assertion_error") for d in details):
        return None
    count = len(details)
    parts = [f"{'.'.join(str(part) for part in d.get('loc', ())) or title}: {d.get('msg', '')}" for d in details]
    return f"{count} validation error{'s' if count != 1 else ''} for {title}: " + "; ".join(parts)


def _after_value_error(text: str) -> str:
    """pydantic's rendering keeps the raised text after "Value error, " (or "Assertion failed, ")."""
    for prefix in ("Value error, ", "Assertion failed, "):
        if prefix in text:
            tail = text.split(prefix, 1)[1]
            # pydantic appends "[type=..., input_value=...]" on the following line.
            return tail.split("\n    [type=", 1)[0].split(" [type=", 1)[0].strip()
    return text
