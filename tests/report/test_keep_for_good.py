"""`kvconform report` as the console script moves what it loads out of the cyclic collector's reach; called in a
process of the caller's (a test), it leaves that process's collector as it was."""

from __future__ import annotations

import gc
from types import SimpleNamespace

from harness.cli import main
from harness.commands.report import keep_for_good
from tests.report.synthetic import config_document


def test_the_console_script_freezes_what_it_holds():
    before = gc.get_freeze_count()
    held = [{"entry": index} for index in range(1000)]
    keep_for_good(SimpleNamespace(owns_process=True))
    assert gc.get_freeze_count() >= before + len(held)


def test_a_caller_in_its_own_process_keeps_its_collector(tmp_path):
    results = tmp_path / "results.json"
    results.write_text(config_document().dumps(), encoding="utf-8")
    frozen, threshold = gc.get_freeze_count(), gc.get_threshold()
    held = [{"entry": index} for index in range(1000)]
    assert main(["report", "--from", str(results), "--output-dir", str(tmp_path / "out")]) in (0, 1)
    assert (tmp_path / "out" / "compatibility.md").exists()
    # frozen objects freed since leave the count (so it may fall); none was frozen
    assert gc.get_freeze_count() <= frozen and gc.get_threshold() == threshold and held
