"""kvconform's own connectors in the config resolver: registered at import of `reference_impl.connector`."""

import json
import subprocess
import sys

import pytest

LMCACHE_LIKE = '{"kv_connector": "LMCacheLikeConnector", "kv_role": "kv_both"}'


def _fresh(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a new interpreter, so no earlier import of this test session helps."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_explain_resolves_the_lmcache_like_connector_as_hma_capable():
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "explain", "--json", "--vllm-version", "0.33.0",
                           "--kv-transfer-config", LMCACHE_LIKE], capture_output=True, text=True)
    assert proc.returncode == 0, f"explain refused LMCacheLikeConnector: {proc.stderr.strip()}"
    outcome = json.loads(proc.stdout)
    assert outcome["error"] is None and outcome["unknown"] is None, outcome
    assert outcome["resolved_disable_hma"] is False, "an HMA-capable connector leaves HMA on in 0.33"
    assert "connector_from_reference" in outcome["rules"], "found in the reference registry, not by module path"
    assert "connector_hma_capable" in outcome["rules"], outcome["rules"]


@pytest.mark.parametrize("first", ["reference_impl.config", "reference_impl.connector", "reference_impl.config.factory",
                                   "reference_impl.connector.factory", "reference_impl.engine.core"])
def test_registration_in_any_import_order(first):
    proc = _fresh(f"import {first}\n"
                  "from reference_impl.config.factory import KVConnectorFactory\n"
                  "print(','.join(KVConnectorFactory.registered_names()))")
    assert proc.returncode == 0, f"importing {first} first fails (import cycle?): {proc.stderr.strip()[-300:]}"
    assert proc.stdout.strip() == "LMCacheLikeConnector", \
        "only kvconform's own names are registered; ExampleConnector and MultiConnector are vLLM's, modelled per era"


def test_vllm_names_stay_with_the_era_model():
    from reference_impl.config import resolve_case

    outcome = resolve_case({"id": "example", "vllm_version": "0.33.0", "flag": None, "stage": "create_connector",
                            "kv_connector": "ExampleConnector", "kv_role": "kv_both"})
    assert outcome["error"] is None or outcome["error"]["stage"] != "input", outcome
    assert "connector_from_registry" in outcome["rules"], f"ExampleConnector is vLLM's built-in: {outcome['rules']}"
    assert "connector_from_reference" not in outcome["rules"], outcome["rules"]
