"""`kvconform explain` and `kvconform resolve`: output, JSON and every bad input (one line, exit 2)."""

import json
import subprocess
import sys

import pytest

from harness.cli import main
from reference_impl import releases

# The release registry's rows, so a new release is not a hand edit here: the newest row (explain's default), the
# minor after it (outside the known range) and the profiles (rows marked profile, oldest first).
NEWEST_ROW = releases.RELEASES[-1]
NEWEST_MINOR = ".".join(map(str, NEWEST_ROW.key[:2]))
BEYOND = f"{NEWEST_ROW.key[0]}.{NEWEST_ROW.key[1] + 1}.0"
PROFILE_NAMES = ", ".join(releases.profiles())

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
    assert [w["text"][:40] for w in payload["warnings"]] == [
        "There is a latency regression when using",
        "Turning off hybrid kv cache manager beca",
    ]
    assert set(payload["rule_descriptions"]) == set(payload["rules"])


def test_explain_env_and_tpu_unknown(capsys):
    code, out, _ = run(capsys, "explain", "--vllm-version", "0.33.0", "--platform", "tpu")
    assert code == 0 and "result: unknown" in out and "tpu_inference" in out
    code, out, _ = run(capsys, "explain", "--vllm-version", "0.13.0", "--attention-chunk-size", "64", "--env", "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1")
    assert code == 0 and "HMA enabled" in out and "warnings: none" in out


def test_explain_rejected_spelling_is_one_line_naming_the_releases_that_take_it(capsys):
    """A flag the release's `vllm serve` does not take is a usage error (exit 2, one line), never an answer
    with exit 0: it says which release explain used and from which release the flag exists."""
    code, out, err = run(capsys, "explain", "--vllm-version", "0.13.0", "--enable-hybrid-kv-cache-manager")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith("kvconform explain: vLLM 0.13.0 does not accept --enable-hybrid-kv-cache-manager")
    assert "vLLM 0.33.0 and later do" in err


def test_explain_defaults_to_the_newest_release_and_says_so(capsys):
    """Without --vllm-version: the newest release of the registry (0.34.0 today, where the README's --enable-...
    spelling exists), named on the first line and in the JSON."""
    code, out, _ = run(capsys, "explain", "--enable-hybrid-kv-cache-manager")
    assert code == 0
    assert out.splitlines()[0].startswith(
        f"vLLM {NEWEST_ROW.version} (the newest release kvconform knows; --vllm-version picks another)")
    assert "result: HMA enabled" in out
    code, out, _ = run(capsys, "explain", "--json")
    payload = json.loads(out)
    assert (payload["vllm_version"], payload["era"], payload["vllm_version_default"]) == (NEWEST_ROW.version, NEWEST_ROW.era, True)
    code, out, _ = run(capsys, "explain", "--json", "--vllm-version", "0.13.0")
    assert json.loads(out)["vllm_version_default"] is False
    code, out, _ = run(capsys, "explain", "--vllm-version", "0.13.0")
    assert "newest release" not in out


@pytest.mark.parametrize("argv, first_line", [
    (["--platform", "ROCm", "--vllm-version", "0.33.0"], "vLLM 0.33.0: era v0.33"),
    (["--vllm-version", "V0.34"], "vLLM 0.34.0: era v0.34"),
    (["--vllm-version", "SEED"], "vLLM 0.13.0: era seed"),
], ids=["platform", "version", "profile"])
def test_explain_reads_choices_ignoring_case(capsys, argv, first_line):
    code, out, _ = run(capsys, "explain", *argv)
    assert code == 0 and out.startswith(first_line), out
    assert "platform: rocm" in out or "--platform" not in argv


def test_explain_stage_and_layers_ignore_case(capsys):
    code, out, _ = run(capsys, "explain", "--stage", "KV_CACHE_GROUPS", "--layers", "Full,MAMBA")
    assert code == 0 and "through stage kv_cache_groups" in out and "KV cache group: mamba" in out, out


def test_explain_suggests_the_connector_name_vllm_registers(capsys):
    """vLLM's registry is case-sensitive, so explain answers as vLLM does (unsupported) and the hint names
    the registered spelling."""
    ktc = '{"kv_connector": "nixlconnector", "kv_role": "kv_both"}'
    code, out, _ = run(capsys, "explain", "--vllm-version", "0.34.0", "--kv-transfer-config", ktc)
    assert code == 0 and "Unsupported connector type: nixlconnector" in out
    assert "did you mean 'NixlConnector' (names are case-sensitive)?" in out


def test_explain_every_release_in_range(capsys):
    for minor in range(11, 34):
        version = "0.11.1" if minor == 11 else f"0.{minor}.0"
        code, out, err = run(capsys, "explain", "--vllm-version", version, "--disable-hybrid-kv-cache-manager")
        assert code == 0, (version, err)
        assert "HMA disabled" in out, version


BAD_EXPLAIN = [
    (["--vllm-version", "0.9.0"], "vllm_version: '0.9.0' is outside"),
    (["--vllm-version", BEYOND], f"{releases.RELEASES[0].version} to {NEWEST_MINOR}.x"),
    (["--vllm-version", "banana"], "vllm_version: 'banana'"),
    (["--platform", "mainframe"], "platform: 'mainframe' is not accepted; expected one of cuda"),
    (["--env", "NOEQUALS"], "--env: 'NOEQUALS'"),
    (["--env", "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=yes"], "env.VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE: 'yes'"),
    (["--attention-chunk-size", "x"], "--attention-chunk-size"),
    (["--stage", "cli_parse"], "--stage"),
    (["--stage", "bogus"], "stage: 'bogus'"),
    (["--platfrom", "rocm"], "unrecognized option --platfrom; did you mean --platform?"),
    (["--plat", "rocm"], "unrecognized option --plat; did you mean --platform?"),
    (["--vllm-versoin", "0.33.0"], "did you mean --vllm-version?"),
    (["--vllm-version", "latest"], f"({PROFILE_NAMES}, v0.10, v0.11, v0.14"),
    (["--platform", "cdua"], "--platform: 'cdua' is not accepted; did you mean cuda?"),
    (["--vllm-version", "seeed"], "--vllm-version: 'seeed' is not accepted; did you mean seed?"),
    (["--stage", "confg"], "--stage: 'confg' is not accepted; did you mean config?"),
    (["--layers", "full,mamaba"], "--layers: 'mamaba' is not accepted; did you mean mamba?"),
    (["--vllm-version", "0.12.0", "--enable-hybrid-kv-cache-manager"],
     "vLLM 0.12.0 does not accept --enable-hybrid-kv-cache-manager (its `vllm serve` exits 2: unrecognized arguments); "
     "vLLM 0.33.0 and later do"),
    (["--kv-transfer-confg", "{}"], "--kv-transfer-confg is not a vLLM flag explain reads; did you mean --kv-transfer-config?"),
    (["--kv-connector", "NixlConnector"], "--kv-connector is not a vLLM flag explain reads; the vLLM flags it reads: "),
    (["NixlConnector"], "unexpected argument 'NixlConnector'"),
    (["--installed", "lmcash"], "--installed: 'lmcash' is not accepted; did you mean lmcache? (accepted: lmcache, "
                                "mooncake"),
    (["--installed", "lmcache=="], "--installed: 'lmcache==' has no version after '=='"),
    (["--installed", ","], "--installed: ',' names no package"),
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
        {"id": "e", "kv_connector": "X", "kv_connector_module_path": "no.such.module", "stage": "create_connector"},
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
    # a module path that does not import is vLLM's answer, at the stage the seed factory imports it
    # (no declared message: its id is null)
    assert outcomes[4]["error"] == {"id": None, "type": "ModuleNotFoundError", "stage": "create_connector",
                                    "text": "No module named 'no'"}
    for index, needle in [(1, "flag: 'yes'"), (2, "surprise"), (5, "vllm_version: '1.0.0'"), (6, "multi_connector_children"), (7, "case:")]:
        error = outcomes[index]["error"]
        assert error["stage"] == "input" and needle in error["text"], (index, error)


@pytest.mark.parametrize("text, message", [
    ("[{", "is not valid JSON"),
    ('"a string"', "expected a JSON list"),
    ('[{"id": "unterminated', "(Unterminated string starting at line 1 column 9)"),
    ('{"id": "single"}', "got a single object (wrap a single case in [ ])"),
])
def test_resolve_bad_document(capsys, monkeypatch, text, message):
    code, out, err = run(capsys, "resolve", "--cases", "-", stdin=text, monkeypatch=monkeypatch)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_resolve_missing_file(capsys, tmp_path):
    code, _, err = run(capsys, "resolve", "--cases", str(tmp_path / "nope.json"))
    assert code == 2 and "cannot read" in err


def test_resolve_file_as_positional_argument(capsys, tmp_path):
    path = tmp_path / "cases.json"
    path.write_text(json.dumps([{"id": "x", "profile": "seed", "flag": True}]))
    code, out, err = run(capsys, "resolve", str(path))
    assert code == 0, err
    assert json.loads(out)[0]["resolved_disable_hma"] is True


EXIT_CODES = [
    (["--vllm-version", "0.13.0"], 0),
    (["--vllm-version", "0.13.0", "--disable-hybrid-kv-cache-manager"], 10),
    (["--vllm-version", "0.13.0", "--no-disable-hybrid-kv-cache-manager", "--kv-events-config", "{}"], 11),
    (["--vllm-version", "0.33.0", "--platform", "tpu"], 12),
]


@pytest.mark.parametrize("argv, status", EXIT_CODES, ids=[str(status) for _, status in EXIT_CODES])
def test_explain_exit_code(capsys, argv, status):
    """`--exit-code`: 0 HMA on, 10 off, 11 error, 12 unknown; without it explain answers with 0."""
    assert run(capsys, "explain", "--exit-code", *argv)[0] == status
    assert run(capsys, "explain", *argv)[0] == 0


LMCACHE_MP = '{"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both"}'


def test_explain_installed_answers_for_a_deployment_with_the_package(capsys):
    """Issue 32: the modelled install lacks lmcache (vLLM's import fails, E-NO-LMCACHE); `--installed lmcache`
    answers as if it were importable and says which version it assumed. lmcache 0.5.6's class subclasses
    SupportsHMA (measured on vLLM 0.33.0: the factory accepts it with HMA on)."""
    question = ["explain", "--vllm-version", "0.34.0", "--enable-hybrid-kv-cache-manager", "--kv-transfer-config",
                LMCACHE_MP]
    _, without, _ = run(capsys, *question)
    if "No module named 'lmcache'" not in without:
        pytest.skip("lmcache is importable here: the modelled install is this Python's")
    assert "optional packages: as this Python finds them (lmcache not installed" in without
    code, out, err = run(capsys, *question, "--installed", "lmcache")
    assert code == 0, err
    assert "assumed installed (--installed): lmcache 0.5.6 (no version given: the newest kvconform has facts on)" in out
    assert "result: HMA enabled (disable_hybrid_kv_cache_manager = False), through stage create_connector" in out
    assert "package_assumed_installed" in out and "package_version_known" in out
    _, out, _ = run(capsys, *question, "--installed", "LMCache==0.4.2")
    assert "assumed installed (--installed): lmcache 0.4.2" in out and "result: unknown" in out
    assert "(lmcache 0.4.2 is not a version kvconform has facts on)" in out
    # before 0.33.0 the in-tree class is vLLM's own, never SupportsHMA: E-F with the package installed
    _, out, _ = run(capsys, "explain", "--vllm-version", "0.20.0", "--no-disable-hybrid-kv-cache-manager",
                    "--kv-transfer-config", LMCACHE_MP, "--installed", "lmcache")
    assert "Connector LMCacheMPConnector does not support HMA but HMA is enabled" in out
    _, out, _ = run(capsys, *question, "--installed", "lmcache", "--json")
    assert json.loads(out)["installed"] == {"lmcache": "0.5.6"}


def test_explain_unknown_connector_is_vllms_answer(capsys):
    """An unregistered name: vLLM's "Unsupported connector type" where the era looks the class up, and the
    era's registry (vLLM's own, not kvconform's connectors) as a hint line."""
    ktc = '{"kv_connector": "LMCacheConectorV1", "kv_role": "kv_both"}'
    code, out, _ = run(capsys, "explain", "--vllm-version", "0.13.0", "--kv-transfer-config", ktc)
    assert code == 0
    assert "ValueError at stage create_connector" in out and "Unsupported connector type: LMCacheConectorV1" in out
    registry_line = next(line for line in out.splitlines() if "registers no connector" in line)
    assert "LMCacheConnectorV1" in registry_line and "LMCacheLikeConnector" not in registry_line
    code, out, _ = run(capsys, "explain", "--vllm-version", "0.33.0", "--stage", "config", "--kv-transfer-config", ktc)
    assert "ValueError at stage config" in out and "Unsupported connector type: LMCacheConectorV1" in out
    code, out, _ = run(capsys, "explain", "--vllm-version", "0.13.0", "--stage", "config", "--kv-transfer-config", ktc)
    assert "HMA disabled" in out  # the seed does not look the class up at config time


def test_explain_invalid_role_and_negative_offloading(capsys):
    code, out, _ = run(capsys, "explain", "--kv-transfer-config", '{"kv_connector": "ExampleConnector", "kv_role": "both"}')
    # vLLM validates --kv-transfer-config as a KVTransferConfig while parsing (pydantic's Literal check)
    assert "SystemExit at stage cli_parse" in out
    assert "argument --kv-transfer-config: 1 validation error for KVTransferConfig: kv_role: Input should be 'kv_producer', 'kv_both' or 'kv_consumer'" in out
    code, out, _ = run(capsys, "explain", "--vllm-version", "0.33.0", "--stage", "config", "--kv-offloading-size", "-4")
    assert code == 0 and "HMA enabled" in out  # vLLM does not validate the size


def test_explain_module_path_that_does_not_import(capsys, tmp_path, monkeypatch):
    (tmp_path / "raising_connector_mod.py").write_text("raise RuntimeError('boom on import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for module, expected in [("no_such_module_xyz", "ModuleNotFoundError at stage config"), ("raising_connector_mod", "RuntimeError at stage config")]:
        ktc = json.dumps({"kv_connector": "C", "kv_role": "kv_both", "kv_connector_module_path": module})
        code, out, err = run(capsys, "explain", "--vllm-version", "0.33.0", "--kv-transfer-config", ktc)
        assert code == 0 and expected in out and "Traceback" not in out + err, out + err


def test_explain_layers_at_stage_config_says_not_evaluated(capsys):
    code, out, _ = run(capsys, "explain", "--layers", "full,mamba", "--stage", "config")
    assert code == 0 and "KV cache groups: not evaluated" in out and "kv_cache_groups_not_evaluated" in out


def test_unknown_subcommand_and_option(capsys):
    assert run(capsys, "frobnicate")[0] == 2
    code, out, err = run(capsys, "explian")
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert "invalid choice: 'explian'; did you mean explain? (choose from explain, resolve" in err


def test_subcommands_and_choices_ignore_case(capsys):
    code, out, _ = run(capsys, "Explain", "--vllm-version", "0.33.0")
    assert code == 0 and out.startswith("vLLM 0.33.0")
    code, out, _ = run(capsys, "checks", "--tier", "must", "--format", "JSON")
    assert code == 0 and {check["tier"] for check in json.loads(out)} == {"MUST"}
    code, _, err = run(capsys, "checks", "--tier", "mst")
    assert code == 2 and "invalid choice: 'MST'; did you mean MUST?" in err
    code, _, err = run(capsys, "resolve", "--cases", "-", "--bogus")
    assert code == 2 and "--bogus" in err and err.count("\n") == 1


def test_console_script_exit_code(tmp_path):
    """The installed entry point: one line on stderr, exit 2, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "harness.cli", "explain", "--vllm-version", "9.9.9"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and proc.stderr.strip().count("\n") == 0
