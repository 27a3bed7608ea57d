"""The `kv_cache_groups` stage takes an era id and reads the era's order of warning and error from the era table
(`Era.unify_warns_before_error`), not a style name of its own: every era groups as the era it evolves from says."""

from __future__ import annotations

import pytest

from reference_impl.config import messages
from reference_impl.config.eras import ERAS
from reference_impl.config.kv_cache_groups import resolve_groups


@pytest.mark.parametrize("era", [era.id for era in ERAS])
def test_every_era_groups_in_its_order_of_warning_and_error(era):
    warnings: list[str] = []
    with pytest.raises(ValueError) as info:
        resolve_groups(["full", "mamba"], True, era, warnings)
    warns_first = next(e for e in ERAS if e.id == era).unify_warns_before_error
    assert str(info.value) == (messages.E_UNIFY_SEED if warns_first else messages.E_UNIFY_V033)
    assert warnings == ([messages.W_U] if warns_first else [])


def test_the_era_must_be_an_era_id():
    with pytest.raises(ValueError, match=r"^era must be an era id \(v0\.10, v0\.11, pre-seed, seed, .*\), got 'v9'$"):
        resolve_groups(["full"], True, "v9")
