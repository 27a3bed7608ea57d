"""`kvconform explain` and `kvconform resolve`: output, JSON and every bad input (one line, exit 2)."""

import json
import subprocess
import sys

import pytest

from harness.cli import main

LMCACHE = '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}'


def run(capsys, *argv, stdin=None, monkeypatch=None):
    if stdin is not None:
        import io

        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_explain_user_question(capsys):
    """"What happens with --no-disable-hybrid-kv-cache-manager and LMCache on 0.13?" (issue 2)."""
    code, out, err = run(capsys, "explain", "--no-disable-hybrid-kv-cache-manager", "--kv-transfer-config", LMCACHE, "--vllm-version", "0.13.0", "--platform", "cuda")
    assert code == 0, err
    assert "era seed" in out
    assert "ValueError at stage create_connector" in out
    assert "Connector LMCacheConnectorV1 does not support HMA but HMA is enabled" in out
    assert "factory_hma_check_failed" in out


def test_explain_config_stage_only(capsys):
    code, out, _ = run(capsys, "explain", "--no-disable-hybrid-kv-cache-manager", "--kv-transfer-config", LMCACHE, "--vllm-version", "0.13.0", "--stage", "config")
    assert code == 0
    assert "HMA enabled (disable_hybrid_kv_cache_manager = False)" in out


def test_explain_json(capsys):
    code, out, _ = run(capsys, "explain", "--json", "--vllm-version", "0.13.0", "--attention-chunk-size", "8192", "--kv-transfer-config", LMCACHE)
    assert code == 0
    payload = json.loads(out)
    assert payload["resolved_disable_hma"] is True
    assert payload["era"] == "seed" and payload["vllm_version"] == "0.13.0"
    assert [w[:40] for w in payload["warnings"]] == [
        "There is a latency regression when using",
        "Turning off hybrid kv cache manager beca",
    ]
    assert set(payload["rule_descriptions"]) == set(payload["rules"])


def test_explain_env_and_tpu_unknown(capsys):
    code, out, _ = run(capsys, "explain", "--vllm-version", "0.33.0", "--platform", "tpu")
    assert code == 0 and "result: unknown" in out and "tpu_inference" in out
    code, out, _ = run(capsys, "explain", "--vllm-version", "0.13.0", "--attention-chunk-size", "64", "--env", "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1")
    assert code == 0 and "HMA enabled" in out and "warnings: none" in out


def test_explain_rejected_spelling_is_explained(capsys):
    code, out, _ = run(capsys, "explain", "--vllm-version", "0.13.0", "--enable-hybrid-kv-cache-manager")
    assert code == 0
    assert "SystemExit at stage cli_parse" in out and "unrecognized arguments: --enable-hybrid-kv-cache-manager" in out


def test_explain_every_release_in_range(capsys):
    for minor in range(11, 34):
        version = "0.11.1" if minor == 11 else f"0.{minor}.0"
        code, out, err = run(capsys, "explain", "--vllm-version", version, "--disable-hybrid-kv-cache-manager")
        assert code == 0, (version, err)
        assert "HMA disabled" in out, version


BAD_EXPLAIN = [
    (["--vllm-version", "0.9.0"], "vllm_version: '0.9.0' is outside"),
    (["--vllm-version", "0.34.0"], "0.10.0 to 0.33.x"),
    (["--vllm-version", "banana"], "vllm_version: 'banana'"),
    (["--platform", "mainframe"], "platform: 'mainframe' is not accepted; expected one of cuda"),
    (["--env", "NOEQUALS"], "--env: 'NOEQUALS'"),
    (["--env", "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=yes"], "env.VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE: 'yes'"),
    (["--attention-chunk-size", "x"], "--attention-chunk-size"),
    (["--stage", "cli_parse"], "--stage"),
    (["--stage", "bogus"], "stage: 'bogus'"),
    (["--kv-transfer-config", '{"kv_connector": "LMCacheConectorV1", "kv_role": "kv_both"}'], "kv_connector: 'LMCacheConectorV1' is not accepted; expected a connector vLLM 0.13.0 registers"),
]


@pytest.mark.parametrize("argv, message", BAD_EXPLAIN, ids=[" ".join(a) for a, _ in BAD_EXPLAIN])
def test_explain_bad_input(capsys, argv, message):
    code, out, err = run(capsys, "explain", *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and message in err, err
    assert "Traceback" not in err


def test_resolve_batch_with_a_bad_case(capsys, monkeypatch):
    cases = [
        {"id": "a", "profile": "v0.33", "flag": False, "kv_events": True},
        {"id": "b", "flag": "yes"},
        {"id": "c", "profile": "seed", "surprise": 1},
        {"id": "d", "platform": "tpu", "profile": "seed"},
        {"id": "e", "kv_connector": "X", "kv_connector_module_path": "no.such.module"},
        {"id": "f", "vllm_version": "1.0.0"},
        {"id": "g", "profile": "seed", "multi_connector_children": ["NixlConnector"]},
        "not an object",
    ]
    code, out, _ = run(capsys, "resolve", "--cases", "-", stdin=json.dumps(cases), monkeypatch=monkeypatch)
    assert code == 0
    outcomes = json.loads(out)
    assert [o["id"] for o in outcomes] == ["a", "b", "c", "d", "e", "f", "g", None]
    assert outcomes[0]["resolved_disable_hma"] is False and outcomes[0]["error"] is None
    assert outcomes[3]["resolved_disable_hma"] is True
    for index, needle in [(1, "flag: 'yes'"), (2, "surprise"), (4, "kv_connector_module_path: 'no.such.module' does not import"), (5, "vllm_version: '1.0.0'"), (6, "multi_connector_children"), (7, "case:")]:
        error = outcomes[index]["error"]
        assert error["stage"] == "input" and needle in error["message"], (index, error)


@pytest.mark.parametrize("text, message", [("[{", "is not valid JSON"), ('"a string"', "expected a JSON list")])
def test_resolve_bad_document(capsys, monkeypatch, text, message):
    code, out, err = run(capsys, "resolve", "--cases", "-", stdin=text, monkeypatch=monkeypatch)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_resolve_missing_file(capsys, tmp_path):
    code, _, err = run(capsys, "resolve", "--cases", str(tmp_path / "nope.json"))
    assert code == 2 and "cannot read" in err


def test_unknown_subcommand_and_option(capsys):
    assert run(capsys, "frobnicate")[0] == 2
    code, _, err = run(capsys, "resolve", "--cases", "-", "--bogus")
    assert code == 2 and "--bogus" in err and err.count("\n") == 1


def test_console_script_exit_code(tmp_path):
    """The installed entry point: one line on stderr, exit 2, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "explain", "--vllm-version", "9.9.9"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0
