"""`--shard K/N`: run one of N deterministic, duration-balanced shards of the collected tests (`harness.sharding`).

Applied after every other selection (`-k`, `-m`, the suites' own), so the N shards of one command line partition
exactly what the unsharded command runs. Under pytest-xdist every worker computes the same shard from the same
collection. The shard is recorded in the results file's run_info (`shard`), so `kvconform merge` of the N
results files is the whole run and says how it was assembled.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.plugins.activation import SUITES_DIR, SUITES_PACKAGE
from harness.plugins.results import add_run_info
from harness.sharding import DEFAULT_DURATIONS, NO_DURATIONS, ShardError, load_durations, parse_shard, select

_SHARD = pytest.StashKey[object]()
_DURATIONS = pytest.StashKey[object]()


def pytest_addoption(parser):
    group = parser.getgroup("kvconform")
    group.addoption(
        "--shard", dest="kvconform_shard", default=None, metavar="K/N",
        help="run only shard K of N (1 <= K <= N): every collected test lands in exactly one shard, balanced by "
             "recorded durations and independent of the machine; merge the N results files with kvconform merge.",
    )
    group.addoption(
        "--shard-durations", dest="kvconform_shard_durations", default=None, metavar="PATH",
        help="durations file that balances --shard (default: the one kvconform ships; written by "
             "kvconform durations RESULTS -o PATH).",
    )


def pytest_configure(config):
    value = config.getoption("kvconform_shard", None)
    if value is None:
        if config.getoption("kvconform_shard_durations", None):
            raise pytest.UsageError("--shard-durations: only used with --shard K/N")
        return
    path = config.getoption("kvconform_shard_durations", None) or DEFAULT_DURATIONS
    try:
        config.stash[_SHARD] = parse_shard(value)
        # The shipped file may be absent from a trimmed install: equal counts then.
        config.stash[_DURATIONS] = (load_durations(path) if (path != DEFAULT_DURATIONS or path.exists())
                                    else NO_DURATIONS)
    except ShardError as exc:
        raise pytest.UsageError(str(exc)) from None
    add_run_info(config, shard=str(config.stash[_SHARD]))


def shard_id(item) -> str:
    """The id a test is sharded and weighed by: its node id, except that a test of the installed kvconform suites is
    named from the `suites` folder (`suites/config/test_matrix.py::...`) whatever pytest's rootdir, so machines whose
    suites lie in different places (a checkout, a venv's site-packages) cut the same shards and find the
    durations file's entries."""
    try:
        relative = Path(item.path).resolve().relative_to(SUITES_DIR)
    except (ValueError, OSError, AttributeError):
        return item.nodeid
    _, sep, rest = item.nodeid.partition("::")
    return f"{SUITES_PACKAGE}/{relative.as_posix()}{sep}{rest}"


@pytest.hookimpl(trylast=True)  # after -k/-m and every other selection
def pytest_collection_modifyitems(session, config, items):
    shard = config.stash.get(_SHARD, None)
    if shard is None or not items:
        return
    ids = {item: shard_id(item) for item in items}
    chosen = select(ids.values(), shard, config.stash[_DURATIONS])
    kept = [item for item in items if ids[item] in chosen]
    dropped = [item for item in items if ids[item] not in chosen]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_report_header(config):
    shard = config.stash.get(_SHARD, None)
    return [f"kvconform shard {shard} (balanced by recorded durations; the other shards run the rest)"] if shard else []
