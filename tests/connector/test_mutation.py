"""The suite's own mutation score (`kvconform mutate`, harness/commands/mutate.py): the catalogue of bug classes
(`harness/connector_mutants.py`) applies to the template as written, each class names a check and, where the project
has one, the buggy connector with the same bug; a small sample of mutants runs as CI's share of the score (the
check written for each class must catch it, black-box); bad options are one line and exit status 2. The full
score is `kvconform mutate -j 2` (README)."""

from __future__ import annotations

import ast
import inspect

import pytest

from harness.cli import main
from harness.commands.mutate import run_mutants
from harness.connector_checks import CHECKS
from harness.connector_mutants import MUTANTS, TEMPLATE_PATH, mutant, mutated_source
from tests.connector import buggy

# CI's sample: two classes of different kinds (a key bug, a data-path bug), each caught by the check written for it.
SAMPLE = ("salt-blind-keys", "null-block-writer")


@pytest.mark.parametrize("name", [m.name for m in MUTANTS])
def test_each_mutant_applies_to_the_template_and_compiles(name):
    candidate = mutant(name)
    source = mutated_source(candidate)
    assert source != TEMPLATE_PATH.read_text()
    ast.parse(source)
    assert candidate.check in CHECKS
    assert candidate.twin is None or inspect.isclass(getattr(buggy, candidate.twin, None)), candidate.twin


def test_a_mutant_whose_text_moved_is_an_error_not_a_silent_no_op():
    with pytest.raises(ValueError, match="occurs 0 times in the template"):
        mutated_source(mutant("salt-blind-keys"), source="class TemplateConnector: pass\n")


def test_the_names_are_unique():
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)


def test_a_sample_of_mutants_is_caught_black_box_by_the_check_written_for_it():
    rows = run_mutants(list(SAMPLE), checks="named", backdoors="off", jobs=2, timeout=60)
    assert {r["name"]: r["caught_by"] for r in rows} == {name: [mutant(name).check] for name in SAMPLE}


@pytest.mark.parametrize("argv, needle", [
    (["mutate", "--mutant", "nope"], "kvconform mutate: --mutant 'nope' is not a mutant; accepted: block-ids-zero"),
    (["mutate", "-j", "0"], "kvconform mutate: --jobs 0 must be at least 1"),
    (["mutate", "--timeout", "0"], "kvconform mutate: --timeout 0 must be a positive number of seconds"),
    (["mutate", "--checks", "some"], "kvconform mutate: argument --checks: invalid choice: 'some'"),
])
def test_bad_options_are_one_line_and_exit_2(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(needle), err


def test_list_names_every_mutant(capsys):
    assert main(["mutate", "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in out] == [m.name for m in MUTANTS]
