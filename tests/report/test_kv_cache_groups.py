"""A connector cell's KV cache group count travels in its results entry (`extra.num_kv_cache_groups`, recorded by
the connector suite from the preset it ran): the report judges multi-group behaviour by that number, never by a
table of preset names of its own; a results file written before the field (schema 1 to 4) gets it from its
presets' names as it loads, and renders as it did."""

from __future__ import annotations

import json

import pytest

from harness.report import render_reports
from harness.report.connector_section import hma_verdict, is_multi_group
from harness.results_model import (GROUPS_KEY, ResultsDocument, ResultsFileError, load_results, make_entry,
                                   num_kv_cache_groups)
from tests.report.synthetic import config_entry, groups_record, run_info

# Reviewed: the KV cache groups of the presets named below (reference_impl/engine/presets.py: fa_only one full
# attention group; fa+swa full + sliding window; fa+swa+mamba full + sliding window + Mamba; NAME@blockN is NAME
# with every block at N tokens, the same groups).
REVIEWED_GROUPS = {"fa_only": 1, "fa+swa": 2, "fa+swa+mamba": 3, "fa+swa+mamba@block256": 3, "scratch_group": 2}


def _entry(check: str, preset: str, status: str = "passed", groups: int | None = None, connector: str = "Vendor"):
    extra = {"description": "d", "evidence": None}
    if groups is not None:
        extra[GROUPS_KEY] = groups
    return make_entry(nodeid=f"suites/connector/test_x.py::test_{check}[{connector}-{preset}]", suite="connector",
                      status=status, cell={"connector": connector, "check": check, "tier": "MUST", "preset": preset},
                      message=f"{check} [{preset}]: it broke" if status == "failed" else None, extra=extra)


@pytest.mark.parametrize("preset", sorted(REVIEWED_GROUPS))
def test_the_hand_made_entries_carry_what_the_suite_records(preset):
    """The report tests' entries (`tests.report.synthetic.groups_record`) carry the presets' own counts."""
    assert groups_record(preset) == {GROUPS_KEY: REVIEWED_GROUPS[preset]}
    assert groups_record("-") == {}


def test_the_section_reads_the_recorded_count_not_the_preset_name():
    # The same preset name, recorded with another count (a layout a target built in its place): the count decides.
    assert is_multi_group(_entry("C14 round-trip-bytes", "fa+swa", groups=2))
    assert not is_multi_group(_entry("C14 round-trip-bytes", "fa+swa", groups=1))
    assert is_multi_group(_entry("C14 round-trip-bytes", "a-vendors-own-model", groups=3))
    assert not is_multi_group(_entry("C14 round-trip-bytes", "fa+swa+mamba"))  # nothing recorded: not counted
    # A check that runs a multi-group model whatever its preset cell says (its record in harness.connector_checks).
    assert is_multi_group(_entry("C01 declares-hma", "-"))


def test_the_hma_verdict_follows_the_recorded_count():
    """A MUST failure on a cell recorded as two-group makes the connector one that must not declare SupportsHMA; the
    same failure recorded on a one-group model is a finding of its own."""
    two = [_entry("C01 declares-hma", "-"), _entry("C14 round-trip-bytes", "fa+swa", "failed", groups=2)]
    assert hma_verdict("Vendor", two).startswith("❌ Vendor declares `SupportsHMA` but must not: on multi-group "
                                                 "models it fails MUST check(s) C14 round-trip-bytes.")
    one = [_entry("C01 declares-hma", "-"), _entry("C14 round-trip-bytes", "fa+swa", "failed", groups=1),
           _entry("C17 layer-group-routing", "fa+swa+mamba", groups=3)]
    assert hma_verdict("Vendor", one) == ("✅ Vendor declares `SupportsHMA` and may: it passes every MUST check that "
                                          "applies on every multi-group preset (1 multi-group cell of 1 check ran).")


def _older_file(tmp_path, schema: int, entries: list[dict], name: str = "old.json"):
    path = tmp_path / name
    data = {**ResultsDocument(run_info=run_info(), results=entries).to_json(), "schema_version": schema}
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("schema", [1, 2, 3, 4])
def test_an_older_file_gets_the_count_from_its_presets_names(tmp_path, schema):
    entries = [_entry("C14 round-trip-bytes", preset) for preset in REVIEWED_GROUPS]
    entries += [_entry("C01 declares-hma", "-"), _entry("C14 round-trip-bytes", "a-preset-since-dropped"),
                _entry("C14 round-trip-bytes", "fa+swa+mamba@block0"),
                _entry("C14 round-trip-bytes", "fa_only", groups=2, connector="Recorded"), config_entry()]
    loaded = load_results(_older_file(tmp_path, schema, entries)).results
    counts = {(e["cell"].get("connector"), e["cell"].get("preset")): num_kv_cache_groups(e) for e in loaded}
    assert counts == {**{("Vendor", preset): groups for preset, groups in REVIEWED_GROUPS.items()},
                      ("Vendor", "-"): None, ("Vendor", "a-preset-since-dropped"): None,
                      ("Vendor", "fa+swa+mamba@block0"): None,
                      ("Recorded", "fa_only"): 2,  # a count in the file is kept
                      ("noconn", None): None}  # a config entry gets none
    assert GROUPS_KEY not in loaded[-1]["extra"]


def test_a_current_file_is_read_as_written(tmp_path):
    """Schema 5: what the suite recorded (or did not) stands; nothing is looked up by name."""
    entries = [_entry("C14 round-trip-bytes", "fa+swa"), _entry("C14 round-trip-bytes", "fa_only", groups=3)]
    loaded = load_results(_older_file(tmp_path, 5, entries)).results
    assert [num_kv_cache_groups(e) for e in loaded] == [None, 3]


@pytest.mark.parametrize(("value", "shown"), [(0, "0 (a number)"), (-1, "-1 (a number)"), ("2", '"2" (a string)'),
                                              (2.5, "2.5 (a number)"), (True, "true (a boolean)"),
                                              ([2], "[2] (an array)")])
def test_a_malformed_count_is_one_clear_error(tmp_path, value, shown):
    path = _older_file(tmp_path, 5, [_entry("C14 round-trip-bytes", "fa+swa", groups=value)])
    with pytest.raises(ResultsFileError) as caught:
        load_results(path)
    assert str(caught.value) == (f"results file {path}: results[0].extra.num_kv_cache_groups is {shown}; accepted: "
                                 "a positive number (the KV cache groups of the cell's model) or absent")


def _connector_run() -> list[dict]:
    """A connector that fails a MUST check on multi-group presets only, one that fails on every preset, one that
    passes: each verdict depends on which presets are multi-group."""
    entries = []
    for connector, failing in (("SingleOnly", ()), ("MultiBroken", ("fa+swa", "fa+swa+mamba")),
                               ("Everywhere", tuple(REVIEWED_GROUPS))):
        entries.append(_entry("C01 declares-hma", "-", connector=connector))
        for preset in ("fa_only", "fa+swa", "fa+swa+mamba", "fa+swa+mamba@block256"):
            entries.append(_entry("C14 round-trip-bytes", preset, "failed" if preset in failing else "passed",
                                  groups=REVIEWED_GROUPS[preset], connector=connector))
    return entries


def test_an_older_file_renders_as_the_same_run_recorded_now(tmp_path):
    current = _connector_run()
    older = [dict(e, extra={k: v for k, v in e["extra"].items() if k != GROUPS_KEY}) for e in current]
    now = render_reports(load_results(_older_file(tmp_path, 5, current, "now.json")))
    then = render_reports(load_results(_older_file(tmp_path, 4, older, "then.json")))
    assert now["compatibility.md"] == then["compatibility.md"]
    assert "❌ MultiBroken declares `SupportsHMA` but must not" in now["compatibility.md"]
