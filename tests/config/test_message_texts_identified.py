"""Every message text the oracle asserts on (suites/config/tables/messages.toml) is given its own id by
`reference_impl.config.message_ids.identify`, so a new message declared without its fragment fails here instead of
reaching outcomes with a null id (the report, `diff` and `explain` read ids, never texts)."""

from __future__ import annotations

import string

import pytest

from reference_impl.config.message_ids import identify
from suites.config.tables import messages


def _filled(text: str) -> str:
    """The text with each `{field}` filled as a target would (a connector name, a module, a value)."""
    fields = {name for _, name, _, _ in string.Formatter().parse(text) if name}
    return text.format(**{name: "SomeConnector" for name in fields})


@pytest.mark.parametrize("ident", sorted(messages()))
def test_each_oracle_text_is_given_its_id(ident):
    record = messages()[ident]
    assert identify(_filled(record["text"]), record.get("type")) == ident, (
        f"{ident}: reference_impl/config/message_ids.py has no fragment that names this text: {record['text']!r}")


def test_a_text_without_a_fragment_has_no_id():
    # what the test above guards against: a declared message whose text no fragment matches
    assert identify("The hybrid KV cache manager cannot be enabled on this platform.", "ValueError") is None
