"""Per-test result records: the `kvconform_record` fixture that suites use to attach a structured result.

A suite test calls ``kvconform_record(suite=..., cell={...}, expected=..., actual=..., **extra)``; the record
travels with the test's report (``user_properties``) and the results collector turns it into one entry of
``reports/results.json``.
"""

from __future__ import annotations

import pytest

RECORD_KEY = "kvconform"


@pytest.fixture
def kvconform_record(request):
    """Attach one structured record (JSON-serialisable) to the running test's report."""

    def record(*, suite: str, cell: dict, expected=None, actual=None, **extra) -> None:
        payload = {"suite": suite, "cell": dict(cell), "expected": expected, "actual": actual}
        payload.update(extra)
        request.node.user_properties.append((RECORD_KEY, payload))

    return record
