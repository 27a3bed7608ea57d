"""The bad-input catalogue (issue 11) as data: every odd input a user may give, what kvconform must answer.

Each row: the input, the exit status, the stream the answer is on and the text it must contain. A row with
exit status 2 or 4 must be exactly one line on stderr (nothing on stdout, never a traceback); a row that
vLLM answers (exit 0) prints vLLM's answer, not a kvconform input error.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.cli import main
from reference_impl import releases
from reference_impl.config.eras import ERAS

REPO = Path(__file__).resolve().parents[1]
FOO = '{"kv_connector": "FooConnector", "kv_role": "kv_both"}'
BAD_ROLE = '{"kv_connector": "ExampleConnector", "kv_role": "both"}'
NO_MODULE = '{"kv_connector": "C", "kv_role": "kv_both", "kv_connector_module_path": "no_such_module_xyz"}'
# What a release refusal lists, from the release registry and the eras (a new era or profile is no edit here):
# the profiles (rows marked profile, oldest first), then the other era ids, oldest first, and the known range.
PROFILE_NAMES = list(releases.profiles())
OTHER_ERAS = [era.id for era in ERAS if era.id not in PROFILE_NAMES]
KNOWN_RANGE = f"{releases.RELEASES[0].version} to {'.'.join(map(str, releases.RELEASES[-1].key[:2]))}.x"


@dataclass(frozen=True)
class Row:
    """One catalogue entry: `argv` for `kvconform` (or for pytest when `pytest` is set)."""

    id: str
    argv: tuple[str, ...]
    status: int
    stream: str  # "out" or "err"
    expected: tuple[str, ...]
    stdin: str | None = None
    pytest: bool = False
    absent: tuple[str, ...] = field(default=())


CATALOGUE = [
    # -- the resolver says what vLLM says -------------------------------------------------------------------
    Row("unknown-connector-seed", ("explain", "--vllm-version", "0.13.0", "--kv-transfer-config", FOO), 0, "out",
        ("result: ValueError at stage create_connector", "Unsupported connector type: FooConnector")),
    Row("unknown-connector-v033-config", ("explain", "--vllm-version", "0.33.0", "--kv-transfer-config", FOO), 0, "out",
        ("result: ValueError at stage config", "Unsupported connector type: FooConnector")),
    Row("unknown-connector-seed-config-no-error", ("explain", "--vllm-version", "0.13.0", "--stage", "config",
                                                   "--kv-transfer-config", FOO), 0, "out", ("result: HMA disabled",)),
    Row("renamed-connector-v033", ("explain", "--vllm-version", "0.33.0", "--kv-transfer-config",
                                   '{"kv_connector": "P2pNcclConnector", "kv_role": "kv_both"}'), 0, "out",
        ("Unsupported connector type: P2pNcclConnector",)),
    Row("registry-hint-is-vllms", ("explain", "--vllm-version", "0.13.0", "--kv-transfer-config", FOO), 0, "out",
        ("hint: vLLM 0.13.0 registers no connector 'FooConnector'; its registry: DecodeBenchConnector, ExampleConnector, "
         "LMCacheConnectorV1, LMCacheMPConnector, MooncakeConnector, MultiConnector, NixlConnector, "
         "OffloadingConnector, P2pNcclConnector\n",)),
    Row("invalid-kv-role", ("explain", "--kv-transfer-config", BAD_ROLE), 0, "out",
        ("SystemExit at stage cli_parse", "kv_role: Input should be 'kv_producer', 'kv_both' or 'kv_consumer'"),
        absent=("Please specify kv_role",)),
    Row("invalid-kv-role-resolve", ("resolve", "-"), 0, "out", ('"type": "ValidationError"', '"stage": "config"'),
        stdin=json.dumps([{"kv_connector": "ExampleConnector", "kv_role": "both"}])),
    Row("negative-offloading-size-explain", ("explain", "--vllm-version", "0.33.0", "--stage", "config",
                                             "--kv-offloading-size", "-4"), 0, "out", ("result: HMA enabled",)),
    Row("negative-offloading-size-resolve", ("resolve", "-"), 0, "out", ('"resolved_disable_hma": false', '"error": null'),
        stdin=json.dumps([{"profile": "v0.33", "kv_offloading_size": -4}])),
    Row("layers-at-stage-config", ("explain", "--layers", "full,mamba", "--stage", "config"), 0, "out",
        ("KV cache groups: not evaluated",)),
    Row("layers-imply-grouping", ("resolve", "-"), 0, "out", ('"kv_cache_groups"',),
        stdin=json.dumps([{"flag": False, "layers": ["full", "sliding_window"]}])),
    Row("module-path-does-not-import", ("explain", "--vllm-version", "0.33.0", "--kv-transfer-config", NO_MODULE), 0,
        "out", ("result: ModuleNotFoundError at stage config", "No module named 'no_such_module_xyz'")),
    # -- the command line -----------------------------------------------------------------------------------
    Row("misspelled-platform", ("explain", "--platfrom", "rocm"), 2, "err",
        ("kvconform explain: unrecognized option --platfrom; did you mean --platform?",)),
    Row("misspelled-version", ("explain", "--vllm-versoin", "0.33.0"), 2, "err", ("did you mean --vllm-version?",)),
    Row("abbreviated-option", ("explain", "--plat", "rocm"), 2, "err", ("did you mean --platform?",)),
    Row("exit-code-on", ("explain", "--exit-code"), 0, "out", ("result: HMA enabled",)),
    Row("exit-code-off", ("explain", "--exit-code", "--disable-hybrid-kv-cache-manager"), 10, "out", ("HMA disabled",)),
    Row("exit-code-error", ("explain", "--exit-code", "--vllm-version", "0.13.0", "--no-disable-hybrid-kv-cache-manager",
                            "--kv-events-config", "{}"),
        11, "out", ("result: ValueError at stage config",)),
    Row("exit-code-unknown", ("explain", "--exit-code", "--vllm-version", "0.33.0", "--platform", "tpu"), 12, "out",
        ("result: unknown",)),
    Row("version", ("--version",), 0, "out", ("kvconform ",)),
    Row("bare-kvconform", (), 2, "err", ("usage: kvconform", "explain", "resolve", "report", "diff", "merge")),
    Row("unknown-top-level-option", ("--verison",), 2, "err", ("kvconform: unrecognized arguments: --verison",)),
    Row("unknown-command", ("frobnicate",), 2, "err", ("invalid choice: 'frobnicate'",)),
    Row("report-help", ("report", "--help"), 0, "out", ("-- PYTEST_ARGS", "Exit status", "130/143")),
    Row("merge-help", ("merge", "--help"), 0, "out", ("RESULTS.json", "MERGED.json", "results files written by")),
    Row("report-unknown-option", ("report", "--bogus"), 2, "err", ("kvconform report: unrecognized argument --bogus",)),
    Row("report-workers-negative", ("report", "-n", "-1"), 2, "err", ("kvconform report: -n: '-1' is not accepted",)),
    Row("report-workers-word", ("report", "-n", "abc"), 2, "err", ("kvconform report: -n: 'abc' is not accepted",)),
    Row("report-suite-missing", ("report", "--suite", "suites.nothere"), 2, "err",
        ("kvconform report: --suite suites.nothere: no such package or path",)),
    Row("resolve-single-object", ("resolve", "-"), 2, "err", ("got a single object (wrap a single case in [ ])",),
        stdin=json.dumps({"flag": True})),
    Row("resolve-json-error-text", ("resolve", "-"), 2, "err",
        ("(Unterminated string starting at line 1 column 9)",), stdin='[{"id": "unterminated', absent=("at at",)),
    Row("version-latest", ("explain", "--vllm-version", "latest"), 2, "err",
        (f"profile ({', '.join(PROFILE_NAMES + OTHER_ERAS)})",)),
    # -- pytest options ---------------------------------------------------------------------------------------
    Row("kv-allocator-module-missing", ("--pyargs", "suites.allocator", "--kv-allocator", "nosuch.alloc:make_target"),
        4, "err", ("ERROR: --kv-allocator nosuch.alloc:make_target: module 'nosuch.alloc' does not import",), pytest=True),
    Row("kv-allocator-misspelled-alias", ("--pyargs", "suites.allocator", "--kv-allocator", "refrence"), 4, "err",
        ("did you mean reference?",), pytest=True),
    Row("kv-connector-backdoors-misspelled", ("--pyargs", "suites.connector", "--kv-connector-backdoors", "of"), 4,
        "err", ("ERROR: --kv-connector-backdoors: 'of' is not accepted; accepted: on, off",), pytest=True),
    Row("kv-connector-timeout-not-a-number", ("--pyargs", "suites.connector", "--kv-connector-timeout", "1m"), 4,
        "err", ("ERROR: --kv-connector-timeout must be a positive number of seconds, got 1m",), pytest=True),
    Row("report-kv-connector-backdoors-misspelled", ("report", "--", "--kv-connector-backdoors", "of"), 2, "err",
        ("kvconform report: --kv-connector-backdoors: 'of' is not accepted; accepted: on, off",)),
    # -- a target spec: one grammar and one answer (exit 4, `OPTION SPEC: why`) for every kind, from pytest and
    #    from `kvconform report` alike (harness.target_spec)
    Row("hma-target-misspelled-name", ("--pyargs", "suites.config", "--hma-target", "vlm"), 4, "err",
        ("ERROR: --hma-target vlm: not of the form module:callable or one of vllm; did you mean vllm?",), pytest=True),
    Row("kv-connector-misspelled-name", ("--pyargs", "suites.connector", "--kv-connector", "LMCacheLike"), 4, "err",
        ("ERROR: --kv-connector LMCacheLike: not of the form module:Class or vllm:NAME or one of LMCacheLikeConnector, "
         "ExampleConnector, MultiConnector; did you mean LMCacheLikeConnector?",), pytest=True),
    Row("report-target-misspelled-name", ("report", "--target", "vlm"), 4, "err",
        ("kvconform report: --target vlm: not of the form module:callable or one of vllm; did you mean vllm?",)),
    Row("report-kv-connector-misspelled-name", ("report", "--kv-connector", "LMCacheLike"), 4, "err",
        ("kvconform report: --kv-connector LMCacheLike: not of the form", "did you mean LMCacheLikeConnector?")),
    Row("report-kv-connector-module-missing", ("report", "--kv-connector", "nosuch_vendor:Conn"), 4, "err",
        ("kvconform report: --kv-connector nosuch_vendor:Conn: module 'nosuch_vendor' does not import",)),
    Row("report-kv-connector-class-misspelled", ("report", "--kv-connector",
                                                 "reference_impl.connector.template:TemplateConector"), 4, "err",
        ("kvconform report: --kv-connector reference_impl.connector.template:TemplateConector: module "
         "'reference_impl.connector.template' has no attribute 'TemplateConector'; did you mean TemplateConnector?",)),
    Row("report-kv-connector-class-unknown", ("report", "--kv-connector", "reference_impl.connector.template:Mine"),
        4, "err", ("has no attribute 'Mine'; it defines TemplateConnector, TemplateMetadata, Transfer",)),
    Row("report-version-unknown", ("report", "--vllm-version", "0.99"), 2, "err",
        (f"kvconform report: --vllm-version: '0.99' is outside the releases kvconform knows ({KNOWN_RANGE}); "
         f"profiles: {', '.join(PROFILE_NAMES)}; or an era id: {', '.join(OTHER_ERAS)}",)),
    Row("diff-misspelled-option", ("diff", "base.json", "head.json", "--chnaged-only"), 2, "err",
        ("kvconform diff: unrecognized argument --chnaged-only; did you mean --changed-only?",)),
    Row("report-kv-allocator-after-dashes", ("report", "--", "--kv-allocator", "refrence"), 4, "err",
        ("kvconform report: --kv-allocator refrence: not of the form module:factory or one of reference, vllm; "
         "did you mean reference?",)),
    Row("report-hma-target-after-dashes", ("report", "--", "--hma-target=nosuch_vendor:resolve"), 4, "err",
        ("kvconform report: --hma-target nosuch_vendor:resolve: module 'nosuch_vendor' does not import",)),
]


def _run_kvconform(row: Row, capsys, monkeypatch) -> tuple[int, str, str]:
    if row.stdin is not None:
        import io

        monkeypatch.setattr(sys, "stdin", io.StringIO(row.stdin))
    try:
        status = main(list(row.argv))
    except SystemExit as exc:  # --help and --version end through argparse
        status = exc.code or 0
    out, err = capsys.readouterr()
    return status, out, err


def _run_pytest(row: Row) -> tuple[int, str, str]:
    proc = subprocess.run([sys.executable, "-m", "pytest", *row.argv, "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True, text=True,
                          timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("row", CATALOGUE, ids=[row.id for row in CATALOGUE])
def test_catalogue(row: Row, capsys, monkeypatch):
    status, out, err = _run_pytest(row) if row.pytest else _run_kvconform(row, capsys, monkeypatch)
    text = out if row.stream == "out" else err
    where = f"{row.id}: kvconform {' '.join(row.argv)} -> exit {status}\nstdout:\n{out[-3000:]}\nstderr:\n{err[-3000:]}"
    assert status == row.status, where
    for expected in row.expected:
        assert expected in text, f"expected {expected!r} on std{row.stream}; {where}"
    for unwanted in row.absent:
        assert unwanted not in out + err, f"{unwanted!r} must not appear; {where}"
    assert "Traceback" not in out + err, where
    if row.status in (2, 4) and row.id != "bare-kvconform":
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, f"a usage error is one line on stderr; {where}"
        if not row.pytest:
            assert out == "", where
    if row.argv[:1] == ("report",):
        assert "kvconform report: running" not in out, "report started pytest before rejecting its options"
