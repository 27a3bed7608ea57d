"""Every word a decision table, a golden file, the oracle, the matrix, the report or the resolver uses is declared in
`reference_impl.vocabulary`, and the vocabulary itself is a leaf (it imports nothing of the project).

The checks read the committed tables and golden files as text (TOML, `id = summary` lines), so each can be run
on a copy with one undeclared word added: the mutant tests below show that such a copy fails.
"""

from __future__ import annotations

import ast
import re
import shutil
import tomllib
from pathlib import Path
from typing import Any, Iterator

import pytest

from harness.eras import ERA_IDS
from harness.targets.config.vllm_platforms import PLATFORM_CLASSES
from reference_impl import vocabulary as V
from reference_impl.config import message_ids, messages as resolver_messages
from suites.config.matrix import connectors_for, features_for, unregistered_for
from suites.config.outcomes import GOLDEN_DIR
from suites.config.tables import TABLES_DIR, era_table

REPO = Path(__file__).resolve().parents[1]
# How a message id looks wherever it is written (W-B1, E-HISPARSE-CUDA); a declared id must look like this too.
MESSAGE_ID = re.compile(r"[EW]-[A-Z0-9]+(?:-[A-Z0-9]+)*")


def _strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    """(where, text) for every string in a parsed TOML value, keys included."""
    if isinstance(value, str):
        yield where, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield f"{where}.{key}", key
            yield from _strings(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{where}[{index}]")


def undeclared_in_tables(tables_dir: Path) -> list[str]:
    """The words of the oracle's decision tables that the vocabulary does not declare: message ids (and their
    kinds) in messages.toml, message ids anywhere in an era's table, its platforms and the eras it names."""
    problems = []
    for path in sorted(tables_dir.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        if path.stem == "messages":
            for ident, entry in data.items():
                if ident not in V.MESSAGES:
                    problems.append(f"{path.name}: message id [{ident}] is not declared")
                elif entry.get("kind") != V.MESSAGES[ident].kind:
                    problems.append(f"{path.name}: [{ident}] is a {entry.get('kind')}, declared a {V.MESSAGES[ident].kind}")
            continue
        for where, text in _strings(data, path.stem):
            if MESSAGE_ID.fullmatch(text) and text not in V.MESSAGES:
                problems.append(f"{path.name}: message id {text!r} at {where} is not declared")
        problems += [f"{path.name}: platform {name!r} is not declared"
                     for name in data.get("platforms", {}) if name not in V.PLATFORMS]
        problems += [f"{path.name}: {key} {data[key]!r} is no era"
                     for key in ("era", "extends") if key in data and data[key] not in ERA_IDS]
    return problems


def _registered_anywhere() -> set[str]:
    return {name for era in ERA_IDS for name in era_table(era)["connectors"]}


def undeclared_in_golden(golden_dir: Path) -> list[str]:
    """The words of the golden files that the vocabulary does not declare: each cell id's flag, platform, feature,
    connector (a declared fixture id, a name some era registers, or the unregistered name) and stage, and each
    summary's stage and message ids."""
    connectors = set(V.CONNECTOR_FIXTURES) | _registered_anywhere() | {V.UNREGISTERED_CONNECTOR}
    problems = []
    for path in sorted(golden_dir.glob("*.txt")):
        era = path.stem
        if era not in ERA_IDS:
            problems.append(f"{path.name}: {era!r} is no era")
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            where = f"{path.name}:{number}"
            cell_id, _, summary = line.partition(" = ")
            flag, platform, features, connector, *stage = cell_id.removeprefix(f"{era}-").split("-")
            for dimension, value, declared in (("flag", flag, V.FLAGS), ("platform", platform, V.PLATFORMS),
                                               ("feature", features, V.FEATURES), ("connector", connector, connectors)):
                if value not in declared:
                    problems.append(f"{where}: {dimension} {value!r} is not declared")
            if stage and (len(stage) > 1 or stage[0] not in V.MATRIX_STAGES):
                problems.append(f"{where}: stage {'-'.join(stage)!r} is not declared")
            for token in summary.split():
                word = token.partition("(")[0]  # E-F(ExampleConnector): the id, then the class it names
                if "@" in word:  # error ValueError@config
                    if word.partition("@")[2] not in (*V.STAGES, *V.OUTCOME_ONLY_STAGES):
                        problems.append(f"{where}: stage {word.partition('@')[2]!r} is not declared")
                elif MESSAGE_ID.fullmatch(word) and word not in V.MESSAGES:
                    problems.append(f"{where}: message id {word!r} is not declared")
    return problems


def test_the_vocabulary_is_a_leaf():
    """It imports nothing of the project, so every floor can import it (reference_impl imports no other)."""
    tree = ast.parse((REPO / "reference_impl" / "vocabulary.py").read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not {name for name in imported if name.split(".")[0] in ("harness", "reference_impl", "suites")}


def test_declared_message_ids_are_well_formed():
    assert all(MESSAGE_ID.fullmatch(ident) for ident in V.MESSAGES), [i for i in V.MESSAGES if not MESSAGE_ID.fullmatch(i)]
    assert {message.kind for message in V.MESSAGES.values()} == {"warning", "error"}
    assert all(ident.startswith("W-" if message.kind == "warning" else "E-") for ident, message in V.MESSAGES.items())


def test_every_word_of_the_decision_tables_is_declared():
    assert undeclared_in_tables(TABLES_DIR) == []


def test_every_word_of_the_golden_files_is_declared():
    assert undeclared_in_golden(GOLDEN_DIR) == []


def test_every_message_id_the_oracle_raises_or_logs_is_declared():
    cited = set()
    for path in (REPO / "suites" / "config").glob("*.py"):
        cited |= set(re.findall(r"\"([EW]-[A-Z0-9]+(?:-[A-Z0-9]+)*)\"", path.read_text(encoding="utf-8")))
    assert cited and cited <= set(V.MESSAGES), sorted(cited - set(V.MESSAGES))


def test_every_id_a_target_labels_a_text_with_is_declared():
    assert message_ids.IDENTIFIED <= set(V.MESSAGES), sorted(message_ids.IDENTIFIED - set(V.MESSAGES))


def test_every_package_import_names_the_id_of_its_message():
    """The report tells a missing optional package by the error's id and type (`PackageImport.message_id`)."""
    from reference_impl.config.eras import VLLM_REGISTERED_CONNECTORS

    imports = {info.imports for info in VLLM_REGISTERED_CONNECTORS if info.imports is not None}
    assert imports
    assert {(i.message_id, message_ids.identify(i.message, i.vllm_type)) for i in imports} == \
        {(i.message_id, i.message_id) for i in imports}


def test_the_resolver_has_a_text_for_every_declared_message():
    """`reference_impl.config.messages` names each text after its id (W-22 -> W_22)."""
    missing = [ident for ident in V.MESSAGES if not isinstance(getattr(resolver_messages, ident.replace("-", "_"), None), str)]
    assert not missing, f"reference_impl.config.messages has no constant for {missing}"


def test_every_matrix_id_is_declared_and_every_declared_id_is_in_the_matrix():
    """The matrix builds the case fields; the vocabulary has each id's label and description, and no stale one."""
    registered = _registered_anywhere()
    features = {f for era in ERA_IDS for f in features_for(era)}
    connectors = {c for era in ERA_IDS for c in connectors_for(era)}
    unregistered = {c for era in ERA_IDS for c in unregistered_for(era)}
    assert features == set(V.FEATURES)
    assert connectors - registered == set(V.CONNECTOR_FIXTURES) - registered
    assert V.NO_CONNECTOR in connectors and V.NO_FEATURES in features
    assert unregistered <= registered | {V.UNREGISTERED_CONNECTOR} and V.UNREGISTERED_CONNECTOR in unregistered


def test_the_vllm_target_knows_a_class_for_every_platform():
    assert tuple(PLATFORM_CLASSES) == V.PLATFORMS


def test_every_case_key_has_a_default_and_the_resolver_accepts_it():
    from reference_impl.config.case import parse_case

    parsed = parse_case({key: value for key, value in V.CASE_DEFAULTS.items()})
    assert parsed.platform == V.CASE_DEFAULTS["platform"] and parsed.stage == "config"


# -- The checks fail on a copy with one undeclared word ------------------------------------------------------------


@pytest.fixture
def tables_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "tables"
    shutil.copytree(TABLES_DIR, copy)
    return copy


def test_an_undeclared_message_in_messages_toml_fails(tables_copy):
    with open(tables_copy / "messages.toml", "a", encoding="utf-8") as handle:
        handle.write('\n[E-NOT-DECLARED]\nkind = "error"\ntype = "ValueError"\ntext = "nothing"\n')
    assert undeclared_in_tables(tables_copy) == ["messages.toml: message id [E-NOT-DECLARED] is not declared"]


def test_an_undeclared_id_in_an_era_table_fails(tables_copy):
    seed = tables_copy / "seed.toml"
    text = seed.read_text(encoding="utf-8")
    assert 'explicit_enable_error = "E-B"' in text
    seed.write_text(text.replace('explicit_enable_error = "E-B"', 'explicit_enable_error = "E-BX"')
                    .replace("tpu = false", "tpu = false\nmainframe = true"), encoding="utf-8")
    assert undeclared_in_tables(tables_copy) == [
        "seed.toml: message id 'E-BX' at seed.block.explicit_enable_error is not declared",
        "seed.toml: platform 'mainframe' is not declared",
    ]


def test_an_undeclared_word_in_a_golden_file_fails(tmp_path):
    copy = tmp_path / "golden"
    copy.mkdir()
    text = (GOLDEN_DIR / "seed.txt").read_text(encoding="utf-8")
    line = "seed-F-cpu-chunked-noconn = error ValueError@config E-B | warn W-C"
    assert line in text.splitlines()
    (copy / "seed.txt").write_text(text.replace(line, "seed-F-cpu-chunked_env9-noconn = error ValueError@setup E-Q | "
                                                      "warn W-C"), encoding="utf-8")
    number = text.splitlines().index(line) + 1
    assert undeclared_in_golden(copy) == [f"seed.txt:{number}: feature 'chunked_env9' is not declared",
                                          f"seed.txt:{number}: stage 'setup' is not declared",
                                          f"seed.txt:{number}: message id 'E-Q' is not declared"]
