"""`tests.once.once_per_session`: a computation shared by the processes of one test session runs once."""

from __future__ import annotations

import uuid

import pytest

from tests.once import once_per_session, session_dir


def test_the_second_caller_gets_the_first_callers_value_without_running_it(request):
    key = f"once-{uuid.uuid4().hex}"
    calls = []

    def produce(folder):
        calls.append(folder)
        (folder / "evidence.txt").write_text("written once")
        return {"folder": str(folder), "n": len(calls)}

    first = once_per_session(request, key, produce)
    second = once_per_session(request, key, lambda folder: pytest.fail("ran a second time"))
    assert first == second == {"folder": str(calls[0]), "n": 1} and len(calls) == 1
    assert (calls[0] / "evidence.txt").read_text() == "written once", "the computation's files stay readable"
    assert calls[0].parent == session_dir(request)


def test_a_failed_computation_is_not_cached(request):
    key = f"once-{uuid.uuid4().hex}"

    def broken(folder):
        raise AssertionError("the evidence could not be produced")

    with pytest.raises(AssertionError, match="could not be produced"):
        once_per_session(request, key, broken)
    assert once_per_session(request, key, lambda folder: "second try") == "second try"
