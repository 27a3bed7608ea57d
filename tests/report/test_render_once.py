"""Rendering a run does the matrix's work once: its cases grouped by era once for the support table and the config
section together, and each recorded outcome typed once for its cell, its signature and the support table."""

from __future__ import annotations

from collections import Counter

import harness.report.build as build
import harness.report.config_section as config_section
import harness.report.support_section as support_section
from harness.report.config_section import config_sections, group_by_era, matrix_cases
from harness.report.markdown import render_markdown
from harness.report.model import Document
from harness.report.support_section import support_sections
from reference_impl.config.outcome import Outcome
from tests.report.synthetic import config_document


def test_the_matrix_is_grouped_once_per_document(monkeypatch):
    calls = []

    def counted(entries):
        calls.append(1)
        return group_by_era(entries)

    for module in (build, config_section, support_section):
        monkeypatch.setattr(module, "group_by_era", counted, raising=False)
    build.build_document(config_document())
    assert len(calls) == 1


def test_a_shared_grouping_renders_as_each_sections_own():
    entries = config_document().results
    eras = group_by_era(matrix_cases(entries))
    shared = support_sections(entries, eras=eras) + config_sections(entries, eras=eras)
    own = support_sections(entries) + config_sections(entries)
    assert render_markdown(Document("t", "run", shared)) == render_markdown(Document("t", "run", own))


def test_each_recorded_outcome_is_typed_once(monkeypatch):
    document = config_document()
    recorded = {id(entry["actual"]) for entry in document.results if isinstance(entry["actual"], dict)}
    typed = Counter()
    original = Outcome.from_dict.__func__

    def counted(cls, outcome):
        typed[id(outcome)] += 1
        return original(cls, outcome)

    monkeypatch.setattr(Outcome, "from_dict", classmethod(counted))
    build.build_document(document)
    counts = [typed[key] for key in recorded if typed[key]]
    assert counts and max(counts) == 1
