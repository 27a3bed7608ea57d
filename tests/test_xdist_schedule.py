"""The repository's pytest configuration turns xdist's default schedule into work stealing (`conftest.py`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from conftest import steal_work_by_default


def _dist_after(args: tuple[str, ...], dist: str) -> str:
    config = SimpleNamespace(invocation_params=SimpleNamespace(args=args), option=SimpleNamespace(dist=dist))
    steal_work_by_default(config)
    return config.option.dist


@pytest.mark.parametrize("args,dist,expected", [
    (("-n", "2"), "load", "worksteal"),               # xdist's implied default becomes work stealing
    (("-n", "2", "--dist", "load"), "load", "load"),  # an explicit choice stays
    (("-n", "2", "--dist=loadfile"), "loadfile", "loadfile"),
    (("-n", "2", "-d"), "load", "load"),
    ((), "no", "no"),                                  # without xdist nothing changes
])
def test_the_default_schedule_steals_work(args, dist, expected):
    assert _dist_after(args, dist) == expected, f"pytest {' '.join(args)}: --dist should end as {expected}"
