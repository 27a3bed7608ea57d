"""Message ids: a target labels each text with the id docs/rules.md describes (`reference_impl.config.message_ids`),
once, where it meets the text; outcomes carry the ids and the report reads them."""

from __future__ import annotations

import pytest

from reference_impl.config.cases import resolve_case
from reference_impl.config.message_ids import identify
from reference_impl.config.outcome import Outcome, upgrade


# Texts copied from config-rules.md §1.3, §2.4, §3.4 and the errors of suites/config/tables/messages.toml.
@pytest.mark.parametrize(("text", "error_type", "ident"), [
    ("Turning off hybrid kv cache manager because `--kv-transfer-config` is set. This will reduce the performance "
     "of vLLM ... defined in kv_connector/v1/base.py.", None, "W-A1"),
    ("Turning off hybrid kv cache manager because `--kv-transfer-config` is set. ... defined in "
     "kv_connector/v1/base.py and use --no-disable-hybrid-kv-cache-manager to start vLLM.", None, "W-B1"),
    ("Turning off hybrid kv cache manager because connector NixlConnector does not subclass `SupportsHMA`.", None,
     "W-22"),
    ("Turning off hybrid kv cache manager because `--kv-transfer-config` selects a KV connector that does not "
     "support it.", None, "W-C1"),
    ("There is a latency regression when using chunked local attention with the hybrid KV cache manager.", None, "W-C"),
    ("Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. Consider omitting "
     "the --no-disable-hybrid-kv-cache-manager flag to let vLLM decide automatically.", "ValueError", "E-B"),
    ("Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. Consider omitting "
     "the --enable-hybrid-kv-cache-manager flag to let vLLM decide automatically.", "ValueError", "E-C"),
    ("Connector ExampleConnector does not support HMA but HMA is enabled. Please set "
     "`--disable-hybrid-kv-cache-manager`.", "ValueError", "E-F"),
    ("HiSparse requires the hybrid KV cache manager; remove --disable-hybrid-kv-cache-manager ...", "ValueError", "E-H"),
    ("", "AssertionError", "E-MULTI-NO-CONNECTORS"),
    ("Class OffloadingConnector not found in suites.config.external_connectors", "AttributeError", "E-CLASS-NOT-FOUND"),
    ("No module named 'lmcache'", "ModuleNotFoundError", "E-NO-LMCACHE"),
    # vLLM 0.34.0's texts (suites/config/tables/messages.toml)
    ("The current platform does not support HiSparse.", "ValueError", "E-HISPARSE-PLATFORM"),
    ("HiSparse requires a KV transfer config with HiSparseConnector and host_pool_gib; to combine it ...", "ValueError",
     "E-HISPARSE-NEEDS-CONNECTOR"),
    ("Only one HiSparseConnector may be configured", "ValueError", "E-HISPARSE-TWO"),
    ("HiSparseConnector requires host_pool_gib", "ValueError", "E-HISPARSE-NO-HOST-POOL"),
    ("HiSparseConnector host_pool_gib must be positive", "ValueError", "E-HISPARSE-HOST-POOL-NOT-POSITIVE"),
    ("Invalid NixlConnector transfer_mode: 'sideways'", "ValueError", "E-NIXL-TRANSFER-MODE"),
    ("Unknown speculative method 'x'. Built-in methods: ['eagle']; registered custom methods: [].", "ValueError",
     "E-UNKNOWN-SPECULATIVE-METHOD"),
    ("Unsupported connector type: FooConnector", "ValueError", "E-UNSUPPORTED-CONNECTOR"),
    ("something else entirely", "ValueError", None),
    ("", "ValueError", None),
])
def test_message_ids(text, error_type, ident):
    assert identify(text, error_type) == ident


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
