"""Deliberately broken config resolvers: the config matrix must catch each of them.

Each mutant wraps the reference resolver and breaks one rule the spec states, the way a plausible
implementation bug would.
"""

from __future__ import annotations

from reference_impl.config import resolve_case
from reference_impl.config.outcome import OutcomeError, OutcomeWarning


def ignores_kv_events_in_seed(case: dict) -> dict:
    """Forgets that a kv_events_config disables HMA in the seed (spec §2.2 1b)."""
    if case.get("profile") == "seed" and case.get("kv_events"):
        case = {**case, "kv_events": False}
    return resolve_case(case)


def swaps_warning_order(case: dict) -> dict:
    """Logs the connector warning before the chunked-local warning (spec §8.8: W-C comes first from the seed on)."""
    outcome = resolve_case(case)
    return {**outcome, "warnings": list(reversed(outcome["warnings"]))}


# -- Resolvers that break one config invariant each (tests/test_config_invariants.py) ----------------------------
# Each takes the reference's outcome and changes what one invariant forbids, on the inputs that invariant reads.

def _mutate(case: dict, change) -> dict:
    outcome = resolve_case(case)
    if outcome.get("error") or outcome.get("unknown"):
        return outcome
    return change(case, outcome) or outcome


def _flag(case: dict):
    """The flag a case asks for, its command line included (the last HMA flag wins)."""
    flag = case.get("flag")
    for arg in case.get("cli_args") or ():
        if arg.endswith("-hybrid-kv-cache-manager"):
            flag = arg.startswith("--disable-")
    return flag


def _error(message: str, stage: str = "config", kind: str = "ValueError"):
    return OutcomeError.met(kind, stage, message).to_dict()


def _warning(text: str) -> dict:
    return OutcomeWarning.met(text).to_dict()


def absent_fails_for_connectors(case: dict) -> dict:
    """Flag absent + a connector: connector creation fails as if HMA were on (INV-CFG-01)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": None, "error": _error(
        f"Connector {c['kv_connector']} does not support HMA but HMA is enabled.", "create_connector")}
        if _flag(c) is None and c.get("kv_connector") and c.get("stage") == "create_connector" else None)


def absent_refuses_chunked(case: dict) -> dict:
    """Flag absent + chunked local attention: an error, though the disabled flag runs (INV-CFG-02)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": None, "error": _error(
        "chunked local attention cannot be configured")} if _flag(c) is None and c.get("attention_chunk_size") else None)


def ignores_disable(case: dict) -> dict:
    """--disable-hybrid-kv-cache-manager leaves HMA on (INV-CFG-03)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": False} if _flag(c) is True else None)


def ignores_enable(case: dict) -> dict:
    """An explicit enable resolves HMA off without an error (INV-CFG-04)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": True} if _flag(c) is False else None)


def names_the_cause(case: dict) -> dict:
    """Control for INV-CFG-05: the explicit-enable error also names the cause (what a fixed release would say)."""
    outcome = resolve_case(case)
    error = outcome.get("error")
    if error and "explicitly enabled" in error["text"]:
        causes = [word for key, word in (("kv_events", "KV events"), ("attention_chunk_size", "chunked local attention"))
                  if case.get(key)] or ["the platform"]
        return {**outcome, "error": {**error, "text": f"{error['text']} Cause: {', '.join(causes)}."}}
    return outcome


def _has_kv_events(case: dict) -> bool:
    return bool(case.get("kv_events")) or "--kv-events-config" in (case.get("cli_args") or ())


def events_disable_hma(case: dict) -> dict:
    """Any KV events config turns HMA off, enabled or not (INV-CFG-06)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": True, "warnings": [*o["warnings"],
        _warning("Turning off hybrid kv cache manager because of the KV events config.")]}
        if _has_kv_events(c) and _flag(c) is not True else None)


def offloading_turns_hma_off(case: dict) -> dict:
    """The offloading flags turn HMA off where the connector they stand for keeps it on (INV-CFG-07)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": True} if c.get("kv_offloading_size") else None)


def connectors_disable_hma(case: dict) -> dict:
    """Flag absent + any connector: HMA off, capable or not (INV-CFG-08)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": True, "warnings": [*o["warnings"],
        _warning("Turning off hybrid kv cache manager because `--kv-transfer-config` is set.")]}
        if _flag(c) is None and c.get("kv_connector") else None)


def factory_refuses_everything(case: dict) -> dict:
    """An explicit enable: connector creation refuses every connector (INV-CFG-09)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": None, "error": _error(
        f"Connector {c['kv_connector']} does not support HMA but HMA is enabled.", "create_connector")}
        if _flag(c) is False and c.get("kv_connector") and c.get("stage") == "create_connector" else None)


def connectors_never_disable(case: dict) -> dict:
    """Flag absent + any connector: HMA on, capable or not (INV-CFG-10)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": False, "warnings": []}
                   if _flag(c) is None and c.get("kv_connector") and c.get("platform") == "cuda" else None)


def ignores_platform(case: dict) -> dict:
    """A platform without HMA support: HMA on anyway (INV-CFG-11)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": False}
                   if c.get("platform") in ("tpu", "unspecified") and _flag(c) is not True else None)


def role_matters(case: dict) -> dict:
    """kv_producer connectors turn HMA off (kv_role is not an HMA input; INV-CFG-12)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": True}
                   if c.get("kv_connector") and c.get("kv_role") == "kv_producer" else None)


def hints_a_missing_flag(case: dict) -> dict:
    """The explicit-enable error of the seed names --enable-hybrid-kv-cache-manager, which 0.13 refuses (INV-CFG-13)."""
    outcome = resolve_case(case)
    error = outcome.get("error")
    if error and "--no-disable-hybrid-kv-cache-manager" in error["text"]:
        text = error["text"].replace("--no-disable-hybrid-kv-cache-manager", "--enable-hybrid-kv-cache-manager")
        return {**outcome, "error": {**error, "text": text}}
    return outcome


def silent_disable(case: dict) -> dict:
    """HMA turned off, the warnings dropped (INV-CFG-14)."""
    return _mutate(case, lambda c, o: {**o, "warnings": []} if o["resolved_disable_hma"] is True else None)


def warns_but_keeps_hma(case: dict) -> dict:
    """A connector warning that HMA is turned off, while it stays on (INV-CFG-15)."""
    return _mutate(case, lambda c, o: {**o, "warnings": [*o["warnings"], _warning("Turning off hybrid kv cache manager "
        "because `--kv-transfer-config` is set.")]} if c.get("kv_connector") and o["resolved_disable_hma"] is False else None)


def creation_flips_the_decision(case: dict) -> dict:
    """Connector creation reports the opposite HMA value (INV-CFG-16)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": not o["resolved_disable_hma"]}
                   if c.get("stage") == "create_connector" else None)


def ignores_the_env_opt_in(case: dict) -> dict:
    """Chunked local attention turns HMA off even with the env var at 1 (INV-CFG-17)."""
    return _mutate(case, lambda c, o: {**o, "resolved_disable_hma": True} if c.get("attention_chunk_size") else None)


# -- A resolver that gives the matrix every outcome a cell can have (tests/test_config_matrix_mutants.py) ----------

def breaks_cells_every_way(case: dict) -> dict:
    """Seed-era cells fail three ways: a wrong outcome (kv_events ignored, as `ignores_kv_events_in_seed`), the
    target raising (chunked local attention on xpu), and an outcome the comparison cannot read (its rules a number,
    not a list, on tpu without features: an error of the test itself, with a traceback; a warnings value that is no
    list is an outcome of no form, which the comparison reports as such). With
    `tests.config_matrix_outcomes_plugin` some cells also skip, xfail and XPASS."""
    if case.get("platform") == "xpu" and case.get("attention_chunk_size"):
        raise RuntimeError("this resolver cannot resolve chunked local attention on xpu")
    outcome = ignores_kv_events_in_seed(case)
    if case.get("platform") == "tpu" and case.get("id", "").endswith("-none-noconn"):
        return {**outcome, "rules": 7}
    return outcome
