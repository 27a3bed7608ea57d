"""Which declared message a warning or error text is: the id a target assigns where it meets the text.

A config outcome carries its messages' ids (each warning's `id` and the error's, None for a text that is none of
the declared messages): the reference resolver and the vLLM target assign them once, where they meet the text
(`reference_impl.config.outcome.OutcomeWarning.met`, `OutcomeError.met`), so the report, `diff` and `explain` read
ids and never message text. The ids are those `reference_impl.vocabulary.MESSAGES` declares (config-rules.md names them:
§1.3, §2.4, §3.4 and the errors of §3.3/§10), each with the fragment that names its text (`Message.fragment`,
beside the id), so a new message is declared in one record and a release that rewords the rest of a message keeps
its id.
"""

from __future__ import annotations

import re
from functools import lru_cache

from reference_impl.vocabulary import MESSAGES

# (id, pattern) in the vocabulary's order, the order they are tried; the first match wins.
_MESSAGE_PATTERNS: tuple[tuple[str, re.Pattern], ...] = tuple(
    (ident, re.compile(message.fragment, re.S)) for ident, message in MESSAGES.items() if message.fragment is not None)
#: MultiConnector's bare `assert` raises an AssertionError without a message: the one id of an empty text.
EMPTY_ASSERTION_ID = "E-MULTI-NO-CONNECTORS"
#: Every id a text can be given (each declared in `reference_impl.vocabulary.MESSAGES`).
IDENTIFIED = frozenset(ident for ident, _ in _MESSAGE_PATTERNS) | {EMPTY_ASSERTION_ID}


@lru_cache(maxsize=4096)  # the same few texts recur across a matrix's cells: each is matched once
def identify(text: str, error_type: str | None = None) -> str | None:
    """The id of a warning or error text (`error_type`: the exception's class name), or None when it is none of
    the declared messages."""
    if not text.strip():
        return EMPTY_ASSERTION_ID if error_type == "AssertionError" else None
    for ident, pattern in _MESSAGE_PATTERNS:
        if pattern.search(text):
            return ident
    return None
