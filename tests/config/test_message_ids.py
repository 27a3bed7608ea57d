"""Message ids: a target labels each text with the id docs/rules.md describes (`reference_impl.config.message_ids`),
once, where it meets the text; outcomes carry the ids and the report reads them."""

from __future__ import annotations

import string

import pytest

from reference_impl.config import messages as resolver_messages
from reference_impl.config.cases import resolve_case
from reference_impl.config.message_ids import identify
from reference_impl.config.outcome import Outcome, upgrade
from reference_impl.vocabulary import MESSAGES
from suites.config.tables import messages as oracle_messages


def _filled(text: str) -> str:
    """The text with each `{field}` filled as a target would (a connector name, a module, a value)."""
    fields = {name for _, name, _, _ in string.Formatter().parse(text) if name}
    return text.format(**{name: "SomeConnector" for name in fields})


#: Every text each evaluator says, with its id: the oracle's (suites/config/tables/messages.toml, written from
#: vLLM's source) and the resolver's (reference_impl.config.messages, one constant named like each id).
ORACLE_TEXTS = [(ident, _filled(record["text"]), record.get("type")) for ident, record in sorted(oracle_messages().items())]
RESOLVER_TEXTS = [(ident, _filled(getattr(resolver_messages, ident.replace("-", "_"))),
                   oracle_messages().get(ident, {}).get("type")) for ident in MESSAGES]


@pytest.mark.parametrize(("ident", "text", "error_type"), ORACLE_TEXTS, ids=[row[0] for row in ORACLE_TEXTS])
def test_each_oracle_text_is_given_its_id(ident, text, error_type):
    assert identify(text, error_type) == ident, (
        f"{ident}: no fragment of reference_impl.vocabulary.MESSAGES names the oracle's text {text!r}")


@pytest.mark.parametrize(("ident", "text", "error_type"), RESOLVER_TEXTS, ids=[row[0] for row in RESOLVER_TEXTS])
def test_each_resolver_text_is_given_its_id(ident, text, error_type):
    assert identify(text, error_type) == ident, (
        f"{ident}: no fragment of reference_impl.vocabulary.MESSAGES names the resolver's text {text!r}")


@pytest.mark.parametrize(("text", "error_type"), [
    ("something else entirely", "ValueError"),
    ("", "ValueError"),  # only MultiConnector's bare assert is an empty text with an id
    ("The hybrid KV cache manager cannot be enabled on this platform.", "ValueError"),
])
def test_a_text_no_fragment_names_has_no_id(text, error_type):
    assert identify(text, error_type) is None


def test_the_first_fragment_wins():
    # W-B1's text (the seed's connector warning) also holds W-A1's fragment: the vocabulary tries W-B1 first
    assert list(MESSAGES).index("W-B1") < list(MESSAGES).index("W-A1")
    assert identify(_filled(resolver_messages.W_B1)) == "W-B1" and identify(_filled(resolver_messages.W_A1)) == "W-A1"


def test_an_outcome_carries_the_ids_of_its_messages():
    """The reference gives what it logs and raises its id: W-B1 for the seed connector warning, E-F for the factory."""
    warned = resolve_case({"id": "w", "vllm_version": "0.13.0", "kv_connector": "ExampleConnector",
                           "kv_role": "kv_both", "stage": "config"})
    assert [w["id"] for w in warned["warnings"]] == ["W-B1"] and "--kv-transfer-config" in warned["warnings"][0]["text"]
    refused = resolve_case({"id": "e", "vllm_version": "0.13.0", "kv_connector": "ExampleConnector",
                            "kv_role": "kv_both", "flag": False, "stage": "create_connector"})
    assert refused["error"]["id"] == "E-F" and refused["warnings"] == [], refused
    assert list(refused["error"]) == ["id", "type", "stage", "text"]


_OLDER = {"id": 1, "resolved_disable_hma": True, "warnings": ["Hybrid KV cache manager is disabled for this hybrid "
          "model, This means ...", "something else"], "error": None, "rules": [], "unknown": None}


def test_an_outcome_of_the_older_form_is_read_with_the_ids_its_target_would_give():
    """Results files of schema 1 kept warnings as texts and the error's text under `message`, without ids."""
    typed = Outcome.from_dict(dict(_OLDER))
    assert typed.warning_ids == ("W-U", None) and typed.warning_texts == tuple(_OLDER["warnings"])
    assert list(typed.to_dict()) == ["id", "resolved_disable_hma", "warnings", "error", "rules", "unknown"]
    error = Outcome.from_dict({**_OLDER, "warnings": [], "error": {"type": "AssertionError", "message": "",
                                                                  "stage": "x"}}).error
    assert error.to_dict() == {"id": "E-MULTI-NO-CONNECTORS", "type": "AssertionError", "stage": "x", "text": ""}


def test_the_ids_an_older_outcome_carries_are_kept():
    """Schema 2 kept the ids beside the texts (`warning_ids`, the error's `id`): those are read, not given again."""
    older = {**_OLDER, "warning_ids": ["W-X", None], "error": {"type": "ValueError", "message": "m", "stage": "config",
                                                               "id": "E-Y"}}
    assert upgrade(older) == {"id": 1, "resolved_disable_hma": True, "warnings": [
        {"id": "W-X", "text": _OLDER["warnings"][0]}, {"id": None, "text": "something else"}],
        "error": {"id": "E-Y", "type": "ValueError", "stage": "config", "text": "m"}, "rules": [], "unknown": None}


def test_the_typed_form_reads_back_as_it_was_written():
    outcome = resolve_case({"id": "w", "vllm_version": "0.13.0", "kv_connector": "ExampleConnector",
                            "kv_role": "kv_both", "stage": "config", "attention_chunk_size": 8})
    assert Outcome.from_dict(outcome).to_dict() == outcome
    assert upgrade(dict(outcome)) == outcome
    text = "Hybrid KV cache manager is disabled for this hybrid model"
    # a compacted results entry keeps only the part of `expected` that differs from `actual`
    assert upgrade({"rules": ["x"], "warnings": [text]}) == {"rules": ["x"], "warnings": [{"id": "W-U", "text": text}]}
