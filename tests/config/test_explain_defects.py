"""`kvconform explain` marks an outcome a reviewed vLLM defect produced (harness/release/vllm_config_defects.toml).

The expectations are written by hand from the defects' releases: the same command line on a release inside a
defect's range is marked, on its first fixed release it is not.
"""

import json

import pytest

from harness.cli import main

DISABLED_EVENTS = '{"enable_kv_cache_events": false}'


def explain(capsys, *argv):
    code = main(["explain", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.parametrize(("release", "argv", "defect", "fixed_in"), [
    ("0.14.0", ["--kv-offloading-size", "4"], "VLLM-CFG-02", "0.22.0"),
    ("0.13.0", ["--kv-events-config", DISABLED_EVENTS], "VLLM-CFG-01", "0.20.0"),
    ("0.19.0", ["--attention-chunk-size", "8192", "--speculative-config", '{"method": "eagle"}'], "VLLM-CFG-05", None),
])
def test_the_rule_a_defect_fired_is_marked(capsys, release, argv, defect, fixed_in):
    out = explain(capsys, "--vllm-version", release, *argv)
    fixed = f"fixed in {fixed_in}" if fixed_in else "not fixed in any known release"
    marker = next(line for line in out.splitlines() if "known vLLM defect" in line)
    assert marker.strip().startswith(f"known vLLM defect {defect}: ") and marker.endswith(f"({fixed})")
    rules = out.split("rules that fired:")[1].splitlines()
    assert rules[rules.index(marker) - 1].startswith("  - "), "the marker follows the rule that fired"
    payload = json.loads(explain(capsys, "--vllm-version", release, "--json", *argv))
    assert [d["id"] for d in payload["defects"]] == [defect]
    assert payload["defects"][0]["fixed_in"] == fixed_in and payload["defects"][0]["sentence"] in marker


@pytest.mark.parametrize(("release", "argv"), [
    ("0.22.0", ["--kv-offloading-size", "4"]),  # the shortcut runs before the HMA decision from 0.22.0
    ("0.20.0", ["--kv-events-config", DISABLED_EVENTS]),  # KV events no longer turn HMA off
    ("0.14.0", []),
])
def test_no_marker_where_no_defect_produced_the_outcome(capsys, release, argv):
    assert "known vLLM defect" not in explain(capsys, "--vllm-version", release, *argv)
    assert json.loads(explain(capsys, "--vllm-version", release, "--json", *argv))["defects"] == []


def test_an_explicit_enable_refused_for_disabled_kv_events_names_both_defects(capsys):
    payload = json.loads(explain(capsys, "--vllm-version", "0.13.0", "--json", "--no-disable-hybrid-kv-cache-manager",
                                 "--kv-events-config", DISABLED_EVENTS))
    assert payload["error"]["text"].startswith("Hybrid KV cache manager was explicitly enabled")
    assert [d["id"] for d in payload["defects"]] == ["VLLM-CFG-01", "VLLM-CFG-04"]
