"""The error the reference engine raises where vLLM would fail, carrying the stage it fails at."""

from __future__ import annotations


class HMAConfigError(ValueError):
    """A failure vLLM would raise, as a ValueError with the stage and vLLM's own exception class name.

    `vllm_type` is the class vLLM's code raises before pydantic wraps config-time errors
    (for example "ValueError", "AssertionError", "ModuleNotFoundError", or "SystemExit" for argparse).
    """

    def __init__(self, message: str, *, stage: str, vllm_type: str = "ValueError", rule: str | None = None):
        super().__init__(message)
        self.message = message
        self.stage = stage
        self.vllm_type = vllm_type
        self.rule = rule


class UnknownOutcome(Exception):
    """The outcome cannot be known from vLLM's own sources (for example TPU on 0.33); carries the reason."""

    def __init__(self, reason: str, rule: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.rule = rule
