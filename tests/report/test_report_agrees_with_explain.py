"""The report's summary tables never contradict `kvconform explain`.

Every cell of the support table (its config part; a cell that answers for an installed optional package is asked
with `--installed`), of the resolver's cases and of each "at a glance" table (the cells that stand for "does this
configuration work?") is read back from the rendered Markdown, expanded to one answer per release, and the
same configuration is asked of `kvconform explain` as a user would type it: the release, the platform, the
flag as that release spells it, `--kv-transfer-config` JSON and the feature's own options. The report's
answer (HMA on, off, an error and which, unknown) must be explain's. Explain's own command-line path builds
the case (argparse, JSON validation), not the matrix's case dictionaries.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from functools import lru_cache

import pytest

from harness.cli import build_parser
from harness.errors import UsageError
from harness.eras import ERA_IDS, ERA_RELEASES
from harness.report.build import build_document
from harness.report.labels import connector_label, feature_label
from harness.report.markdown import render_markdown_pages
from harness.report.support_section import DEPLOYED_AS
from suites.config.matrix import CHUNK, OFFLOAD_GIB, connectors_for, unregistered_for
from suites.config.oracle import CHUNKED_ENV
from tests.report.md_helpers import table_after
from tests.report.test_committed_report import fresh_config_results

# A feature id -> explain's options for it (docs/reader.md's explain options); HiSparse has none in explain.
FEATURE_OPTIONS = {
    "none": [],
    "kv_events": ["--kv-events-config", "{}"],
    "chunked": ["--attention-chunk-size", str(CHUNK)],
    "chunked_env1": ["--attention-chunk-size", str(CHUNK), "--env", f"{CHUNKED_ENV}=1"],
    "chunked_env0": ["--attention-chunk-size", str(CHUNK), "--env", f"{CHUNKED_ENV}=0"],
    "chunked_eagle": ["--attention-chunk-size", str(CHUNK), "--speculative-config", '{"method": "eagle"}'],
    "offload_native": ["--kv-offloading-backend", "native", "--kv-offloading-size", str(OFFLOAD_GIB)],
    "offload_lmcache": ["--kv-offloading-backend", "lmcache", "--kv-offloading-size", str(OFFLOAD_GIB)],
    "eagle_offload_lmcache": ["--speculative-config", '{"method": "eagle"}', "--kv-offloading-backend", "lmcache",
                              "--kv-offloading-size", str(OFFLOAD_GIB)],
    # the options alone (issue 36)
    "offload_size": ["--kv-offloading-size", str(OFFLOAD_GIB)],
    "offload_backend": ["--kv-offloading-backend", "native"],
    "offload_size_simple": ["--kv-offloading-size", str(OFFLOAD_GIB), "--env", "VLLM_USE_SIMPLE_KV_OFFLOAD=1"],
    "eagle": ["--speculative-config", '{"method": "eagle"}'],
    "v1_off": ["--env", "VLLM_USE_V1=0"],
}
NOT_EXPRESSIBLE = {
    "hisparse": "explain has no HiSparse option (vLLM configures it in the model's attention config)",
    "chunked_custom": "a custom speculative method is a plugin registered in the engine's process; a command line "
                      "cannot register one",
    "chunked_custom_ths": "a custom speculative method is a plugin registered in the engine's process; a command "
                          "line cannot register one",
}


@lru_cache(maxsize=1)
def main_page() -> str:
    return render_markdown_pages(build_document(fresh_config_results()))["compatibility.md"]


def _child_json(child: dict) -> dict:
    out = {"kv_connector": child["kv_connector"]}
    if "kv_role" in child:
        out["kv_role"] = child["kv_role"]
    if child.get("kv_connector_module_path"):
        out["kv_connector_module_path"] = child["kv_connector_module_path"]
    extra = dict(child.get("kv_connector_extra_config") or {})
    if child.get("children") is not None:
        extra["connectors"] = [_child_json(c) for c in child["children"]]
    if extra:
        out["kv_connector_extra_config"] = extra
    return out


def kv_transfer_json(era: str, connector: str) -> str | None:
    """The `--kv-transfer-config` a user passes for one of the matrix's connector ids."""
    fields = {**unregistered_for(era), **connectors_for(era)}.get(connector)
    if fields is None:
        # a connector of another release's matrix: the user types its name, as vLLM names it
        fields = {"kv_connector": connector}
    if not fields:
        return None
    config = {"kv_connector": fields["kv_connector"]}
    if fields.get("kv_role", "kv_both") is not None:  # the NoRole fixture leaves kv_role out
        config["kv_role"] = fields.get("kv_role", "kv_both")
    if fields.get("kv_connector_module_path"):
        config["kv_connector_module_path"] = fields["kv_connector_module_path"]
    extra = dict(fields.get("kv_connector_extra_config") or {})
    if fields.get("multi_connector_children") is not None:
        extra["connectors"] = [_child_json(c) for c in fields["multi_connector_children"]]
    if extra:
        config["kv_connector_extra_config"] = extra
    return json.dumps(config)


def flag_options(era: str, flag: bool | None) -> list[str]:
    if flag is None:
        return []
    if flag is True:
        return ["--disable-hybrid-kv-cache-manager"]
    return ["--enable-hybrid-kv-cache-manager" if ERA_IDS.index(era) >= ERA_IDS.index("v0.33")
            else "--no-disable-hybrid-kv-cache-manager"]


@lru_cache(maxsize=1)
def _parser():
    return build_parser()


@lru_cache(maxsize=None)
def explain(era: str, platform: str, flag: bool | None, connector: str, feature: str, installed: str = "") -> dict:
    """`kvconform explain --json ...` for one configuration (the command line's parser, built once); `installed`:
    its `--installed` value (the support table answers a missing optional package as installed)."""
    argv = ["explain", "--json", "--vllm-version", ERA_RELEASES[era], "--platform", platform,
            *flag_options(era, flag), *FEATURE_OPTIONS[feature]]
    if installed:
        argv += ["--installed", installed]
    transfer = kv_transfer_json(era, connector)
    if transfer is not None:
        argv += ["--kv-transfer-config", transfer]
    args, extra = _parser().parse_known_args(argv)
    args.extra = extra
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            status = args.run(args)
    except UsageError as exc:  # an option the release's `vllm serve` does not take: one line, exit 2
        return {"refused": str(exc)}
    assert status == 0, argv
    return json.loads(out.getvalue())


def explain_kind(result: dict) -> str:
    """'on', 'off', 'unknown', 'error <id or type>', 'refused' -- the report's words are checked against this;
    ' 🐞' after them when explain names a known vLLM defect that produced the outcome."""
    if "refused" in result:
        return "refused"
    defect = " 🐞" if result.get("defects") else ""
    if result["error"]:
        error = result["error"]
        return f"error {error['id'] or error['type']}{defect}"
    if result["unknown"]:
        return "unknown"
    return ("on" if result["resolved_disable_hma"] is False else "off") + defect


def report_kind(text: str) -> str:
    """The same words from a report cell ('✅ on', '⚪ off', '❌ E-F', '❌ refused (E-F)', '✅ yes'), and the mark
    of a known vLLM defect ('⚪ off 🐞', '❌ refused (E-B 🐞)') after them."""
    text = text.strip()
    if " 🐞" in text:
        return report_kind(text.replace(" 🐞", "")) + " 🐞"
    if text.startswith("✅"):
        return "on"
    if text.startswith("⚪"):
        return "off"
    if text.startswith("❔"):
        return "unknown"
    if text.startswith("– not registered"):
        return "error not registered"
    match = re.fullmatch(r"❌ (?:refused \((.+)\)|(.+))", text)
    assert match, f"unexpected cell text {text!r}"
    return f"error {match.group(1) or match.group(2)}"


def holding(changes: list[tuple[int, object]]) -> dict[str, object]:
    """Era -> the value of the last change at or before it, from (era index, value) changes in release order."""
    kinds, current, position = {}, None, 0
    for index, era in enumerate(ERA_IDS):
        while position < len(changes) and changes[position][0] <= index:
            current = changes[position][1]
            position += 1
        if current is not None:
            kinds[era] = current
    return kinds


def expand(timeline: str) -> dict[str, str]:
    """'⚪ off; ✅ on from [0.21.0](…)' -> era -> report kind for every era from the first one named."""
    by_release = {release: era for era, release in ERA_RELEASES.items()}
    changes: list[tuple[int, str]] = []
    for index, part in enumerate(timeline.split("; ")):
        match = re.fullmatch(r"(.+?) from (?:\[([\d.]+)\]\([^)]*\)|([\d.]+))", part)
        if match:
            release = match.group(2) or match.group(3)
            changes.append((ERA_IDS.index(by_release[release]), report_kind(match.group(1))))
        else:
            assert index == 0, f"only the first outcome may name no release: {timeline!r}"
            changes.append((0, report_kind(part)))
    return holding(changes)


def _ids(labeller, ids) -> dict[str, str]:
    return {labeller(ident): ident for ident in ids}


def connector_ids() -> dict[str, str]:
    ids = {c for era in ERA_IDS for c in [*connectors_for(era), *unregistered_for(era)]}
    return _ids(connector_label, ids)


def agree(report: str, result: dict) -> bool:
    """The report's kind is explain's; a release without the feature's option answers unknown in the
    report (the matrix's case) and with argparse's refusal in explain (the command line)."""
    kind = explain_kind(result)
    if report == "error not registered":
        return kind == "error E-UNSUPPORTED-CONNECTOR" and "Unsupported connector type" in result["error"]["text"]
    if report == "unknown" and kind == "refused":
        return "does not accept" in result["refused"]
    return report == kind


_SUPPORT_RANGE = re.compile(r"^(.+?) \[[^\]]+\]\([^)]*#era-([^)]+)\)$")
_ASSUMED = re.compile(r"^(.+?)(?:,)? with (\S+)(?: (\S+))?$")


def _installed(text: str) -> tuple[str, str]:
    """'✅ on, with lmcache 0.5.6' -> ('✅ on', 'lmcache==0.5.6'); 'with lmcache' -> 'lmcache'; none -> ''."""
    match = _ASSUMED.match(text)
    if not match:
        return text, ""
    return match.group(1), match.group(2) + (f"=={match.group(3)}" if match.group(3) else "")


def expand_support(cell: str) -> dict[str, tuple[str, str]]:
    """'config ✅ on [0.21.0–0.34.x](…#era-v0.21); ❌ E-F [0.13.0–0.20.x](…#era-seed) · run …' -> era -> (report
    kind, explain's `--installed` value where the range assumes an optional package installed) for every era from
    the oldest range on."""
    config = re.sub(r" \[[\d,]+\]$", "", cell).split(" · ", 1)[0]
    head, _, ranges = config.partition(": ") if config.startswith("config, with ") else ("", "", config)
    shared = _installed(head)[1] if head else ""
    changes = []
    for part in ranges.removeprefix("config ").split("; "):
        match = _SUPPORT_RANGE.match(part)
        assert match, f"unexpected support cell part {part!r} in {cell!r}"
        word, installed = _installed(match.group(1))
        changes.append((ERA_IDS.index(match.group(2)), (report_kind(word), installed or shared)))
    changes.sort()
    return holding(changes)


def _deployed_as(name: str, era: str) -> str:
    """The matrix configuration a support row stands for in `era` (harness.report.support_section.DEPLOYED_AS)."""
    present = {**unregistered_for(era), **connectors_for(era)}
    return next((f for f in DEPLOYED_AS.get(name, (name,)) if f in present), DEPLOYED_AS.get(name, (name,))[-1])


def support_cases():
    """Every cell of the support table and of the resolver's cases, one answer per release."""
    ids = connector_ids()
    for heading, deployable in (("## Which connector runs with HMA", True), ("### The resolver's cases", False)):
        rows = table_after(main_page(), heading)
        platforms = rows[0][2:]
        for row in rows[1:]:
            for platform, cell in zip(platforms, row[2:]):
                if cell.startswith("not run"):
                    continue
                for era, (kind, installed) in expand_support(cell).items():
                    connector = _deployed_as(row[0], era) if deployable else ids[row[0]]
                    yield era, platform, False, connector, "none", kind, installed


def glance_cases():
    features = _ids(feature_label, FEATURE_OPTIONS.keys() | NOT_EXPRESSIBLE.keys())
    ids = {**connector_ids(), "no connector": "noconn"}
    for platform in re.findall(r"^### At a glance: (\w+)$", main_page(), flags=re.M):
        rows = table_after(main_page(), f"### At a glance: {platform}")
        for connector, feature, auto, enable in rows[1:]:
            for flag, cell in ((None, auto), (False, enable)):
                for era, kind in expand(cell).items():
                    yield era, platform, flag, ids[connector], features[feature], kind, ""


@pytest.mark.parametrize("table", ["support", "glance"])
def test_every_summary_cell_agrees_with_explain(table):
    cases = sorted(set(support_cases() if table == "support" else glance_cases()), key=str)
    assert len(cases) > (300 if table == "support" else 1000), "the tables were read back"
    disagreements, checked = [], 0
    for era, platform, flag, connector, feature, kind, installed in cases:
        if feature in NOT_EXPRESSIBLE:
            continue
        result = explain(era, platform, flag, connector, feature, installed)
        checked += 1
        if not agree(kind, result):
            disagreements.append(f"{era} {platform} flag={flag} {connector} + {feature} {installed}: report {kind!r}, "
                                 f"explain {explain_kind(result)!r} ({result['error'] or result['unknown'] or ''})")
    assert not disagreements, f"{len(disagreements)} of {checked} cells disagree, e.g.:\n" + "\n".join(disagreements[:10])


def test_the_reading_of_a_timeline():
    """Control for the parser above (hand-written): each outcome holds until the next release named."""
    kinds = expand("⚪ off; ❌ refused (E-F) from [0.13.0](compatibility-seed.md#era-seed); ✅ yes from 0.21.0")
    assert kinds["v0.10"] == kinds["pre-seed"] == "off"
    assert kinds["seed"] == kinds["v0.20"] == "error E-F"
    assert kinds["v0.21"] == kinds["v0.33"] == "on"
    assert "v0.10" not in expand("✅ on from 0.13.0")
    assert expand("⚪ off 🐞; ❌ refused (E-B 🐞) from 0.13.0")["seed"] == "error E-B 🐞"


def test_a_connector_cell_is_answered_at_create_connector():
    """The issue's example: LMCacheConnectorV1 with chunked local attention (env 1) and an explicit enable
    on v0.33 / ROCm. Explain raises at create_connector; the report's listing says the same, at that stage."""
    result = explain("v0.33", "rocm", False, "LMCacheConnectorV1", "chunked_env1")
    assert result["error"]["stage"] == "create_connector" and "does not support HMA" in result["error"]["text"]
    pages = render_markdown_pages(build_document(fresh_config_results()))
    rows = [row for row in table_after(pages["compatibility-v0.33.md"], "A connector together with a feature")
            if row[:4] == ["LMCacheConnectorV1", "chunked local, env 1", "rocm", "--enable-…"]]
    assert rows and rows[0][4].startswith("❌ E-F") and rows[0][5] == "create_connector", rows


def test_the_reading_of_a_support_cell():
    """Control for the support cell parser (hand-written): newest range first, each holds from its first release."""
    kinds = expand_support(
        "config ✅ on [0.21.0–0.34.x](compatibility-v0.21.md#era-v0.21); ❌ E-F [0.13.0–0.20.x](x.md#era-seed) · "
        "run ✅ [0.33.0](../docs/a.md) [4,5]")
    assert "pre-seed" not in kinds
    assert kinds["seed"] == kinds["v0.20"] == ("error E-F", "") and kinds["v0.21"] == kinds["v0.34"] == ("on", "")
    kinds = expand_support("config, with lmcache 0.5.6: ✅ on [0.33.0–0.34.x](#era-v0.33); ❌ E-B 🐞 "
                           "[0.13.x](#era-seed) [1]")
    assert kinds["v0.14"] == ("error E-B 🐞", "lmcache==0.5.6") and kinds["v0.33"] == ("on", "lmcache==0.5.6")
    kinds = expand_support("config ❌ E-F [0.13.0–0.34.x](#era-seed); ⚪ off, with lmcache [0.11.1–0.12.x](#era-pre-seed)")
    assert kinds["pre-seed"] == ("off", "lmcache") and kinds["seed"] == ("error E-F", "")
