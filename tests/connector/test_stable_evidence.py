"""A failing check's evidence reads the same on the same input (issue 33): C30 names the models it stored under,
whose names hold the check's store (drawn afresh per run, so one run's leftovers never decide another's verdict),
and the first wrong read, whose request id is drawn per request. Neither may make two runs of one failing cell
read (and diff) as two failures. The checks run in this process through the suite's own `CheckContext` on the
key-blind connectors of `tests.connector.buggy`, each twice, each time on a fresh store."""

from __future__ import annotations

import pytest

from harness.targets.connector.target import ConnectorTarget
from reference_impl.engine.content import model_salt
from suites.connector import test_isolation
from suites.connector.context import STORE_SHOWN, CheckContext


def _evidence(cls: str, test_name: str, preset: str, param: str, store: str | None = None) -> tuple[str, str]:
    """(the failure message of one C30 run of `cls`, the store name that run drew, or `store` where given)."""
    ctx = CheckContext(ConnectorTarget(cls, f"tests.connector.buggy:{cls}", "--kv-connector"), preset, check_id="C30")
    if store is not None:
        ctx.store_name = store
    try:
        with pytest.raises(pytest.fail.Exception) as failed:
            getattr(test_isolation, test_name)(ctx, param)
    finally:
        ctx.close()
    return str(failed.value), ctx.store_name


@pytest.mark.parametrize("cls, test_name, preset, param, needle", [
    # the model names differ after the store's name: what the evidence must still tell apart
    ("ModelBlindKeysConnector", "test_c30_store_shared_across_deployments", "fa_only", "model",
     f"asked with model name kvconform/deployments/{STORE_SHOWN}/"),
    ("SaltBlindConnector", "test_c30_key_isolation", "fa_only", "fa_only", "asked with cache salt tenant-b: hit "),
])
def test_c30_evidence_is_the_same_on_every_run(cls, test_name, preset, param, needle):
    (first, first_store), (second, second_store) = (_evidence(cls, test_name, preset, param) for _ in range(2))
    assert first_store != second_store, "each run draws its own store"
    assert first == second, f"{first}\n!=\n{second}"
    assert first_store not in first and needle in first, first
    if "wrong reads" in first:
        assert "req_id" not in first, first


def _store_where_b_shares_as_salt() -> str:
    """A store name under which C30's model names `<store>/a` and `<store>/b` hash to one content salt (about one
    store in 113 draws: the run where C30 must take another letter for its second model)."""
    for n in range(10_000):
        base = f"kvconform/deployments/kvconform-collide-{n}"
        if model_salt(f"{base}/b") == model_salt(f"{base}/a"):
            return f"kvconform-collide-{n}"
    raise AssertionError("no store name among 10,000 makes the two model names share a salt")


def test_c30_evidence_is_the_same_when_the_second_model_name_had_to_change():
    args = ("ModelBlindKeysConnector", "test_c30_store_shared_across_deployments", "fa_only", "model")
    colliding, store = _evidence(*args, store=_store_where_b_shares_as_salt())
    ordinary, _ = _evidence(*args)
    assert colliding == ordinary, f"{colliding}\n!=\n{ordinary}"
    assert store not in colliding, colliding
