"""The outcome schema of `kvconform resolve`, and `resolve_case`, the reference target.

A case describes one configuration (docs/reference.md, "The resolve schema"; parsed into a `Case` by
`reference_impl.config.case`); an outcome is what the reference engine does with it:
an `Outcome` (`reference_impl.config.outcome`), whose JSON form `resolve_case` returns. `resolve_case` never
raises for a bad case: the outcome's error then has stage "input".
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

from reference_impl.config import eras as E, messages
from reference_impl.config.errors import HMAConfigError, UnknownOutcome
from reference_impl.config.factory import KVConnectorFactory
from reference_impl.config.objects import (
    AttentionConfig,
    CacheConfig,
    HiSparseConfig,
    KVEventsConfig,
    KVTransferConfig,
    ModelConfig,
    Runtime,
    SchedulerConfig,
    SpeculativeConfig,
)
from reference_impl.config.outcome import Outcome, OutcomeError
from reference_impl.config.resolution import SUPPORT_UNKNOWN, VllmConfig, create_connector
from reference_impl.config.vllm_cli import parse_cli
from reference_impl.config.case import Case, CaseError, parse_case
from reference_impl.vocabulary import CASE_DEFAULTS, STAGES


def unregistered_names(kv_transfer: dict[str, Any] | None, era) -> list[str]:
    """Connector names in a kv_transfer dict (children included) that the era's vLLM does not register
    and no module path supplies: vLLM answers them with "Unsupported connector type" where it looks the
    class up. `explain` lists the era's names for them as a hint."""
    if kv_transfer is None:
        return []
    found = []
    name = kv_transfer.get("kv_connector")
    if name is not None and not kv_transfer.get("kv_connector_module_path") and name not in KVConnectorFactory.known_names(era):
        found.append(name)
    for child in (kv_transfer.get("kv_connector_extra_config") or {}).get("connectors") or ():
        if isinstance(child, dict):
            found.extend(unregistered_names(child, era))
    return found


def apply_command_line(case: Case, given: dict[str, Any]) -> Case:
    """The case with the values its command line gives (`given`, as `parse_cli` returns them) in place of its own
    fields (the command line itself kept: `Case.cli_args`)."""
    changes: dict[str, Any] = {"flag": given["flag"]}
    if "kv_transfer_config" in given:
        ktc = given["kv_transfer_config"]
        changes["kv_transfer"] = {
            "kv_connector": ktc.get("kv_connector"),
            "kv_role": ktc.get("kv_role"),
            "kv_connector_module_path": ktc.get("kv_connector_module_path"),
        }
        if ktc.get("kv_connector_extra_config") is not None:  # as `parse_case` writes a connector: extra when given
            changes["kv_transfer"]["kv_connector_extra_config"] = dict(ktc["kv_connector_extra_config"])
    if "kv_events_config" in given:
        changes["kv_events"] = True
    if isinstance(given.get("speculative_config"), dict):
        changes["speculative_method"] = given["speculative_config"].get("method")
        changes["custom_speculative"] = None  # a command line names a method; a plugin registers custom ones
    if isinstance(given.get("hf_overrides"), dict) and "attention_chunk_size" in given["hf_overrides"]:
        changes["attention_chunk_size"] = given["hf_overrides"]["attention_chunk_size"]
    for key in ("kv_offloading_backend", "kv_offloading_size"):
        if key in given:
            changes[key] = given[key]
    return replace(case, **changes)


def command_line_applied(case: Case) -> Case:
    """The case as its command line leaves it (`explain` reads its connectors for hints): unchanged without a
    command line, or with one the era's parser refuses."""
    if case.cli_args is None:
        return case
    try:
        return apply_command_line(case, parse_cli(list(case.cli_args), E.ERAS_BY_ID[case.era]))
    except HMAConfigError:
        return case


def build_vllm_config(case: Case, era: E.Era | None = None) -> VllmConfig:
    """Construct the VllmConfig for a case (this runs the resolution of `era`, by default the case's)."""
    era = E.ERAS_BY_ID[case.era] if era is None else era
    ktc = None
    if case.kv_transfer is not None:
        spec = case.kv_transfer
        ktc = KVTransferConfig(
            kv_connector=spec["kv_connector"], kv_role=spec["kv_role"],
            kv_connector_module_path=spec.get("kv_connector_module_path"),
            kv_connector_extra_config=dict(spec.get("kv_connector_extra_config") or {}),
        )
    return VllmConfig(
        runtime=Runtime(era=era, platform=case.platform, env=dict(case.env), vllm_version=case.vllm_version),
        scheduler_config=SchedulerConfig(disable_hybrid_kv_cache_manager=case.flag),
        kv_transfer_config=ktc,
        kv_events_config=KVEventsConfig() if case.kv_events else None,
        model_config=ModelConfig(attention_chunk_size=case.attention_chunk_size) if case.attention_chunk_size else None,
        speculative_config=(SpeculativeConfig(method=case.speculative_method,
                                              custom_uses_target_hidden_states=case.custom_speculative)
                            if case.speculative_method else None),
        cache_config=CacheConfig(case.kv_offloading_backend, case.kv_offloading_size),
        attention_config=AttentionConfig(HiSparseConfig() if case.hisparse else None),
    )


def outcome(case_id, resolved=None, warnings=(), error: OutcomeError | None = None, rules=(), unknown=None,
            groups=None) -> dict[str, Any]:
    """The JSON form of the outcome the resolver met (`Outcome.met`: each warning given its id), each rule once."""
    return Outcome.met(case_id, resolved, warnings, error, dict.fromkeys(rules), unknown, groups).to_dict()


def group_kv_cache(case: Case, era: E.Era, cfg: VllmConfig, res) -> list[dict]:
    """Stage kv_cache_groups: group the case's layers with the resolved flag, in the era's style."""
    from reference_impl.config.kv_cache_groups import resolve_groups  # torch is only needed for this stage

    # the seed logs W-U before failing; 0.33 fails first (config-rules.md 2.5 and 3.5)
    res.rules.append("kv_cache_groups")
    try:
        groups, _ = resolve_groups(list(case.layers), cfg.scheduler_config.disable_hybrid_kv_cache_manager, era.id,
                                   res.warnings)
    except ValueError as exc:
        error = HMAConfigError(str(exc), stage="kv_cache_groups", rule="kv_cache_groups")
        error.resolution = res
        raise error from None
    return groups


def run_case(case: Case, era: E.Era | None = None) -> dict[str, Any]:
    """Run a validated case through its stages, at the rules of `era` (by default the case's), and return the
    outcome."""
    era = E.ERAS_BY_ID[case.era] if era is None else era
    prefix: list[str] = []
    try:
        if case.cli_args is not None:
            given = parse_cli(list(case.cli_args), era)
            prefix.append("cli_parsed")
            case = apply_command_line(case, given)
            if case.stage == "cli_parse":
                return outcome(case.id, resolved=case.flag, rules=prefix)
            if given.get("speculative_config") is not None and not isinstance(given["speculative_config"], dict):
                # pydantic checks VllmConfig's fields before its __post_init__ resolves anything
                raise HMAConfigError(messages.E_SPECULATIVE_NOT_OBJECT, stage="config", vllm_type="ValidationError",
                                     rule="speculative_config_not_object")
        cfg = build_vllm_config(case, era)
        res = cfg.resolution
        resolved = cfg.scheduler_config.disable_hybrid_kv_cache_manager
        groups = None
        if case.layers is not None and case.stage == "config":
            res.rules.append("kv_cache_groups_not_evaluated")
        elif case.layers is not None:
            groups = group_kv_cache(case, era, cfg, res)
        if case.stage == "create_connector":
            create_connector(cfg, res)
        return outcome(case.id, resolved=resolved, warnings=res.warnings, rules=prefix + res.rules, groups=groups)
    except HMAConfigError as exc:
        res = getattr(exc, "resolution", None)
        error = OutcomeError.met(exc.vllm_type, exc.stage, exc.message)
        if res is None:
            return outcome(case.id, error=error, rules=prefix)
        return outcome(case.id, warnings=res.warnings, error=error, rules=prefix + res.rules)
    except UnknownOutcome as exc:
        if exc.rule == SUPPORT_UNKNOWN:
            known = _same_either_way(case, era)
            if known is not None:
                return known
        res = exc.resolution
        return outcome(case.id, warnings=res.warnings, rules=prefix + res.rules, unknown=exc.reason)


def _same_either_way(case: Case, era: E.Era) -> dict[str, Any] | None:
    """The outcome of a case whose platform's HMA support vLLM's sources do not define (TPU from 0.14), when it
    is the same with the support True and False (e.g. an error MultiConnector's constructor raises whichever way
    the flag was resolved); None when it depends on it. The oracle and the vllm target decide the same way."""
    runs = []
    for support in (True, False):
        assumed = replace(era, platform_support=MappingProxyType({**era.platform_support, case.platform: support}))
        runs.append(run_case(case, assumed))
    comparable = [{key: value for key, value in run.items() if key != "rules"} for run in runs]
    if comparable[0] != comparable[1]:
        return None
    return {**runs[0], "rules": ["platform_unknown", "platform_unknown_same_outcome", *runs[0]["rules"]]}


def input_error(case_id: Any, message: str) -> dict[str, Any]:
    """The outcome for a case that does not follow the schema."""
    return outcome(case_id, error=OutcomeError.met("ValueError", "input", message))


def internal_error(case_id: Any, exc: BaseException) -> dict[str, Any]:
    """The outcome of a case the resolver itself failed on (a bug in kvconform, not vLLM's answer): the
    exception on one line, so one broken case never takes a batch down with it."""
    text = " ".join(str(exc).split())
    return outcome(case_id, error=OutcomeError.met("InternalError", "internal",
                                                   f"{type(exc).__name__}: {text}".rstrip(": ")))


def resolve_case(case: dict[str, Any]) -> dict[str, Any]:
    """The reference target: one case dict in, one outcome dict out; never raises (bad input is an error at
    stage "input", a failure of the resolver itself one at stage "internal" with type "InternalError")."""
    case_id = case.get("id") if isinstance(case, dict) else None
    try:
        parsed = parse_case(case)
    except ValueError as exc:
        return input_error(case_id, str(exc))
    except Exception as exc:  # noqa: BLE001 - reported as the case's outcome
        return internal_error(case_id, exc)
    try:
        return run_case(parsed)
    except Exception as exc:  # noqa: BLE001 - reported as the case's outcome
        return internal_error(case_id, exc)


def resolve_cases(cases: list[Any]) -> list[dict[str, Any]]:
    """Batch form of `resolve_case`; a bad case (or one the resolver fails on) yields an error outcome, the
    others still run."""
    return [resolve_case(case) for case in cases]


__all__ = ["run_case", "resolve_case", "resolve_cases", "CASE_DEFAULTS", "STAGES"]
