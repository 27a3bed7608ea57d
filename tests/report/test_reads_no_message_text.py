"""The report reads ids and statuses, never message text: no message id recovered from a text, no "N/A" prefix
or other skip wording parsed, no message taken apart (issue 33, item 1).

A config outcome's messages carry the ids their target gave them (`reference_impl.config.outcome`), a
check that does not apply carries a typed record (`harness.outcomes`: kind, reason, release, check, preset), and
a skip for another cause its typed cause (`skip_cause`: cannot-run-here, inconclusive); rewording a message must
not change a verdict. The modules that render and compare results are read as source (ast), so
nothing is imported; each rule is shown to catch what it forbids on a small mutant.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What renders or compares results: the report's package and the commands that read results files; the console
# summary, which folds and counts a run's skips by their typed records; and the failure grouping all three share.
READERS = (*sorted((REPO / "harness" / "report").rglob("*.py")), REPO / "harness" / "commands" / "diff.py",
           REPO / "harness" / "commands" / "report.py", REPO / "harness" / "plugins" / "console.py",
           REPO / "harness" / "failure_groups.py")
# Functions that take an id from a text: only targets (and the results file's legacy reader) call them.
TEXT_TO_ID = frozenset({"message_id", "identify", "label_outcome", "legacy_record", "message_label", "met", "upgrade"})
# The wordings of a typed skip (not applicable, cannot run here, inconclusive), and the names the code gives them
# (`harness.outcomes`, `harness.kv_engine`).
NA_WORDINGS = ("N/A: ", "N/A on ", "under --kv-engine", "not HMA-capable", "refuses multi-group", "not applicable",
               "cannot run here", "inconclusive", "not importable", "on the multi-group preset")
NA_NAMES = frozenset({"VLLM_ENGINE_NA_PREFIX", "_NA_PREFIX", "MULTI_GROUP_REFUSAL", "REFUSES_MULTI_GROUP",
                      "_NOT_HMA_CAPABLE", "_FEATURE", "CANNOT_RUN_HERE", "_CANNOT_RUN_HERE", "_INCONCLUSIVE",
                      "_ON_PRESET"})
# What holds a message's text: the entry's `message` key, or a local name for it (a pytest report's `longrepr`: a
# skip's is (path, line, message)).
MESSAGE_KEY = "message"
MESSAGE_NAMES = frozenset({"message", "msg", "longrepr"})
# What a text is taken apart or tested with.
TEXT_TESTS = frozenset({"startswith", "endswith", "partition", "rpartition", "removeprefix", "removesuffix", "split",
                        "find", "index", "search", "match", "fullmatch", "findall", "finditer"})
# What takes a message apart (its words tested, cut or rewritten; a message may be shown, and its whitespace
# folded, but not read for a status or a cause).
MESSAGE_PARSERS = (TEXT_TESTS - {"split"}) | {"sub", "subn", "replace", "count"}


def _is_na_wording(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(wording in node.value for wording in NA_WORDINGS)
    if isinstance(node, ast.Name):
        return node.id in NA_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr in NA_NAMES
    if isinstance(node, ast.JoinedStr):
        return any(_is_na_wording(value) for value in node.values)
    if isinstance(node, ast.FormattedValue):
        return _is_na_wording(node.value)
    if isinstance(node, ast.BinOp):
        return _is_na_wording(node.left) or _is_na_wording(node.right)
    if isinstance(node, ast.Tuple):
        return any(_is_na_wording(element) for element in node.elts)
    return False


def _reads_message(node: ast.AST) -> bool:
    """Whether an expression holds a message's text: `e["message"]`, `e.get("message")`, a name `message`, or
    those combined (`(e.get("message") or "").lower()`)."""
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name) and inner.id in MESSAGE_NAMES:
            return True
        if isinstance(inner, ast.Subscript) and isinstance(inner.slice, ast.Constant) and inner.slice.value == MESSAGE_KEY:
            return True
        if (isinstance(inner, ast.Call) and isinstance(inner.func, ast.Attribute) and inner.func.attr == "get"
                and inner.args and isinstance(inner.args[0], ast.Constant) and inner.args[0].value == MESSAGE_KEY):
            return True
    return False


def problems_in(source: str, where: str) -> list[str]:
    """Each place in `source` that recovers an id from a text or parses an N/A prefix."""
    found = []
    for node in ast.walk(ast.parse(source)):
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = {alias.name.rpartition(".")[2] for alias in node.names}
            if names & TEXT_TO_ID:
                found.append(f"{line}: imports {', '.join(sorted(names & TEXT_TO_ID))} (an id taken from a text)")
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in TEXT_TO_ID:
                found.append(f"{line}: calls {name} (an id taken from a text)")
            elif name in TEXT_TESTS and any(_is_na_wording(arg) for arg in node.args):
                found.append(f"{line}: {name} with an N/A wording (a prefix parsed back)")
            elif name in MESSAGE_PARSERS and any(map(_reads_message, [*node.args, getattr(node.func, "value", None)]
                                                     if isinstance(node.func, ast.Attribute) else node.args)):
                found.append(f"{line}: {name} on a message (its text taken apart)")
        elif isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            if _is_na_wording(node.left):
                found.append(f"{line}: `in` with an N/A wording (a prefix parsed back)")
            elif isinstance(node.left, ast.Constant) and any(map(_reads_message, node.comparators)):
                found.append(f"{line}: `in` on a message (its text tested)")
    return found


def test_the_report_reads_no_message_text():
    found = [problem for path in READERS
             for problem in problems_in(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("mutant", [
    "from harness.report.spec_refs import message_id\n",
    "ident = message_id(error['message'], error['type'])\n",
    "from reference_impl.config.message_ids import identify\n",
    "warning = OutcomeWarning.met(text)\n",
    "from reference_impl.config.outcome import upgrade\n",
    "if message.startswith('N/A on '):\n    pass\n",
    "kind = 'engine' if text.startswith(VLLM_ENGINE_NA_PREFIX) else None\n",
    "release, _, reason = text.removeprefix('N/A on ').partition(': ')\n",
    "if 'under --kv-engine vllm: ' in message:\n    pass\n",
    "if m.startswith(outcomes.MULTI_GROUP_REFUSAL):\n    pass\n",
    "found = re.match(f'N/A on (.*?): ', message)\n",
    # A skip's other causes, and a message taken apart (issue 33: the report read these until skips carried them).
    "if reason.startswith('not applicable: vLLM is not importable'):\n    pass\n",
    "if message.startswith(CANNOT_RUN_HERE):\n    pass\n",
    "message = (entry.get('message') or '').lower()\nif message.startswith('inconclusive'):\n    pass\n",
    "if entry['message'].lower().startswith('cannot run here:'):\n    pass\n",
    "reason = _CHECK_ID.sub('', _PRESET.sub('', e.get('message') or '')).replace('  ', ' ')\n",
    "kind = 'x' if 'did not occur' in entry['message'] else None\n",
    "head, _, rest = entry.get('message').partition(': ')\n",
    # The console folded a non-HMA connector's skips by their words until the skip carried its class (issue 33).
    "match = _NOT_HMA.match(str(longrepr[2]))\n",
    "if reason.startswith('not HMA-capable'):\n    pass\n",
])
def test_each_rule_catches_what_it_forbids(mutant):
    assert problems_in(mutant, "mutant.py"), mutant


def test_writing_an_na_wording_is_no_parsing():
    """The report may say what did not apply in the wording the console shows; it only may not read it back."""
    assert problems_in("line = f'{n} cells N/A {VLLM_ENGINE_NA_PREFIX}{reason}'\n", "fine.py") == []


def test_showing_a_message_is_no_parsing():
    """A message may be shown as it is, its whitespace folded and its first line taken (evidence in a cell)."""
    assert problems_in("note = ' '.join((e.get('message') or '').split())\nfirst = message.splitlines()[0]\n"
                       "cell = Cell('x', 'na', (skipped[0].get('message') or 'not applicable',))\n", "fine.py") == []


# harness.failure_groups keys a failing entry on its typed facts (`typed_failure_key`: a connector check's recorded
# cause, a config cell's outcomes by message ids); `same_failure` reads the message's first line only where an entry
# has none. The functions that build the typed key read no message and call nothing that reads one; nor do those
# of harness.results_model that say what `diff` and `merge` compare (`outcome_of`: warnings and errors by id).
FAILURE_GROUPS = REPO / "harness" / "failure_groups.py"
TYPED_KEY_FUNCTIONS = frozenset({"typed_failure_key", "_outcome_key"})
RESULTS_MODEL = REPO / "harness" / "results_model.py"
OUTCOME_FUNCTIONS = frozenset({"outcome_of", "message_key"})
TEXT_READERS = frozenset({"entry_what", "first_line", "split_check", "cause_key", "failure_message",
                          "text_failure_key", "failure_signature"})


def text_reads_in(source: str, where: str, functions=TYPED_KEY_FUNCTIONS) -> list[str]:
    """Each place in `functions` of `source` that reads a message or calls a function that reads one."""
    found = []
    defined = {node.name for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.FunctionDef) and node.name in functions):
            continue
        for inner in ast.walk(node):
            line = f"{where}:{getattr(inner, 'lineno', '?')} ({node.name})"
            if isinstance(inner, ast.Call):
                name = inner.func.attr if isinstance(inner.func, ast.Attribute) else getattr(inner.func, "id", "")
                if name in TEXT_READERS:
                    found.append(f"{line}: calls {name} (reads the message)")
            elif isinstance(inner, (ast.Subscript, ast.Name)) and _reads_message(inner):
                found.append(f"{line}: reads a message")
    missing = sorted(functions - defined)
    return found + [f"{where}: no function {name} (the rule checks nothing)" for name in missing]


def test_the_typed_failure_key_reads_no_message():
    assert text_reads_in(FAILURE_GROUPS.read_text(encoding="utf-8"), str(FAILURE_GROUPS.relative_to(REPO))) == []


def test_what_diff_and_merge_compare_reads_no_message():
    assert text_reads_in(RESULTS_MODEL.read_text(encoding="utf-8"), str(RESULTS_MODEL.relative_to(REPO)),
                         OUTCOME_FUNCTIONS) == []


@pytest.mark.parametrize("mutant", [
    "def typed_failure_key(entry):\n    return cause_key(entry_what(entry))\n",
    "def _outcome_key(outcome):\n    return first_line(outcome['message'])\n",
    "def _outcome_key(outcome):\n    message = outcome\n    return message\n",
    "def typed_failure_key(entry):\n    return None\n",  # the other one missing: the rule would check nothing
])
def test_the_typed_key_rule_catches_what_it_forbids(mutant):
    assert text_reads_in(mutant, "mutant.py"), mutant
