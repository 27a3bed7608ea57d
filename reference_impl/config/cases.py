"""The case/outcome schema of `kvconform resolve`, and `resolve_case`, the reference target.

A case describes one configuration (see README, "The resolve schema"); an outcome is what the reference
engine does with it: `{"id", "resolved_disable_hma", "warnings", "error", "rules", "unknown"}`.
`resolve_case` never raises for a bad case: the outcome's error then has stage "input".
"""

from __future__ import annotations

from dataclasses import dataclass, replace
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
from reference_impl.config.resolution import SUPPORT_UNKNOWN, VllmConfig, create_connector
from reference_impl.config.vllm_cli import parse_cli
from reference_impl.vocabulary import (AUTO_PLATFORM, CASE_DEFAULTS, ENV_VARS, LAYER_KINDS, OFFLOADING_BACKENDS,
                                       PLATFORM_CHOICES, STAGES)


class CaseError(ValueError):
    """A case that does not follow the schema; the message names the field, the value and what is accepted."""


def _fail(field_name: str, value: Any, accepted: str) -> CaseError:
    return CaseError(f"{field_name}: {value!r} is not accepted; expected {accepted}")


def _opt_str(case: dict, key: str) -> str | None:
    value = case.get(key)
    if value is not None and not isinstance(value, str):
        raise _fail(key, value, "a string or null")
    return value


def _bool(case: dict, key: str) -> bool:
    value = case.get(key, False)
    if not isinstance(value, bool):
        raise _fail(key, value, "true or false")
    return value


_CHILD_KEYS = ("kv_connector", "kv_role", "kv_connector_module_path", "kv_connector_extra_config", "children")


def _extra_config(value: Any, path: str, children: list[dict] | None, children_key: str) -> dict[str, Any] | None:
    """A connector's `kv_connector_extra_config` (any JSON object). Its "connectors" list, if any, is read as
    MultiConnector children (the `children` format); giving them in both places is refused."""
    if value is None:
        return {"connectors": children} if children is not None else None
    if not isinstance(value, dict):
        raise _fail(path, value, "null or a JSON object (the connector's kv_connector_extra_config)")
    extra = dict(value)
    if "connectors" in extra:
        if children is not None:
            raise _fail(f"{path}.connectors", extra["connectors"], f"null when {children_key} gives the children")
        extra["connectors"] = _children(extra["connectors"], f"{path}.connectors")
        if extra["connectors"] is None:  # "connectors": null is a key vLLM reads as a missing list
            del extra["connectors"]
    elif children is not None:
        extra["connectors"] = children
    return extra


def _children(value: Any, path: str) -> list[dict] | None:
    """multi_connector_children -> vLLM's kv_connector_extra_config["connectors"] list."""
    if value is None:
        return None
    shape = '{"kv_connector", "kv_role", "kv_connector_module_path", "kv_connector_extra_config", "children"}'
    if not isinstance(value, list):
        raise _fail(path, value, f"null or a list of connector names or {shape} objects")
    out = []
    for index, child in enumerate(value):
        where = f"{path}[{index}]"
        if isinstance(child, str):
            out.append({"kv_connector": child, "kv_role": "kv_both"})
            continue
        if not isinstance(child, dict):
            raise _fail(where, child, f"a connector name or an object {shape}")
        unknown = set(child) - set(_CHILD_KEYS)
        if unknown:
            raise _fail(f"{where}.{sorted(unknown)[0]}", child[sorted(unknown)[0]], f"one of {', '.join(_CHILD_KEYS)}")
        for key in ("kv_connector", "kv_role", "kv_connector_module_path"):
            if child.get(key) is not None and not isinstance(child[key], str):
                raise _fail(f"{where}.{key}", child[key], "a string or null")
        # An unknown role, name or module path is a configuration vLLM answers (its KVTransferConfig and
        # factory raise), not bad input: the factory reports it at the stage vLLM would.
        entry = {k: child.get(k) for k in ("kv_connector", "kv_role", "kv_connector_module_path")}
        nested = _children(child.get("children"), f"{where}.children")
        extra = _extra_config(child.get("kv_connector_extra_config"), f"{where}.kv_connector_extra_config",
                              nested, f"{where}.children")
        if extra is not None:
            entry["kv_connector_extra_config"] = extra
        out.append(entry)
    return out


def _speculative_method(value: Any) -> tuple[str | None, bool | None]:
    """`speculative_method`: a method name (built in), or a custom method registered by a plugin, given as
    {"name": ..., "uses_target_hidden_states": true|false}. Returns (name, the custom method's
    uses_target_hidden_states, or None for a name)."""
    if value is None or isinstance(value, str):
        return value, None
    shape = 'null, a method name, or {"name": "...", "uses_target_hidden_states": true|false} (a custom method)'
    if not isinstance(value, dict):
        raise _fail("speculative_method", value, shape)
    unknown = sorted(set(value) - {"name", "uses_target_hidden_states"})
    if unknown:
        raise _fail(f"speculative_method.{unknown[0]}", value[unknown[0]], "one of name, uses_target_hidden_states")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise _fail("speculative_method.name", name, "the custom method's name, a non-empty string")
    if name in E.BUILTIN_SPECULATIVE_METHODS:
        # vLLM's register_speculative_method refuses a built-in name
        raise _fail("speculative_method.name", name, "a name that is not a built-in speculative method")
    uses = value.get("uses_target_hidden_states", False)
    if not isinstance(uses, bool):
        raise _fail("speculative_method.uses_target_hidden_states", uses, "true or false")
    return name, uses


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


@dataclass(slots=True)
class Case:
    """A validated case."""

    id: Any
    era: Any
    vllm_version: str
    stage: str
    platform: str
    flag: bool | None
    cli_args: list[str] | None
    env: dict[str, str]
    kv_transfer: dict[str, Any] | None
    kv_events: bool
    attention_chunk_size: int | None
    speculative_method: str | None
    hisparse: bool
    kv_offloading_backend: str | None
    kv_offloading_size: float | None
    layers: list[str] | None = None
    #: a custom speculative method's `uses_target_hidden_states`; None when the method is a name
    custom_speculative: bool | None = None


def parse_case(case: Any) -> Case:
    """Validate one case dict; raises CaseError naming the offending field."""
    if not isinstance(case, dict):
        raise _fail("case", case, "a JSON object")
    unknown = [key for key in case if key not in CASE_DEFAULTS]
    if unknown:
        accepted = ", ".join(CASE_DEFAULTS)
        raise _fail(unknown[0], case[unknown[0]], f"a known key ({accepted})")
    version_key = "vllm_version" if case.get("vllm_version") is not None else "profile"
    version = case.get(version_key)
    try:
        era, version = E.resolve_era(version)
    except ValueError as exc:
        raise CaseError(str(exc).replace("vllm_version:", f"{version_key}:", 1)) from None
    stage = case.get("stage")
    if stage is None:  # layers ask for their grouping: they imply the kv_cache_groups stage
        stage = "kv_cache_groups" if case.get("layers") is not None else "config"
    if stage not in STAGES:
        raise _fail("stage", stage, f"one of {', '.join(STAGES)}")
    flag = case.get("flag")
    if flag is not None and not isinstance(flag, bool):
        raise _fail("flag", flag, "null, true or false")
    cli_args = case.get("cli_args")
    if cli_args is not None and (not isinstance(cli_args, list) or not all(isinstance(a, str) for a in cli_args)):
        raise _fail("cli_args", cli_args, "a list of strings")
    if stage == "cli_parse" and cli_args is None:
        raise _fail("stage", stage, "cli_parse only together with cli_args")
    platform = case.get("platform", CASE_DEFAULTS["platform"])
    if platform not in PLATFORM_CHOICES:
        raise _fail("platform", platform, f"one of {', '.join(PLATFORM_CHOICES)}")
    if platform == AUTO_PLATFORM:
        platform = detect_platform()
    env = case.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise _fail("env", env, "an object of string names to string values")
    for name in ENV_VARS:
        if name in env and not env[name].strip().lstrip("-").isdigit():
            raise _fail(f"env.{name}", env[name], "an integer such as 0 or 1 (vLLM reads it as bool(int(value)))")

    connector = _opt_str(case, "kv_connector")
    module_path = _opt_str(case, "kv_connector_module_path")
    role = _opt_str(case, "kv_role") if "kv_role" in case else CASE_DEFAULTS["kv_role"]
    children = _children(case.get("multi_connector_children"), "multi_connector_children")
    extra = _extra_config(case.get("kv_connector_extra_config"), "kv_connector_extra_config", children,
                          "multi_connector_children")
    if module_path is not None:
        if connector is None:
            raise _fail("kv_connector_module_path", module_path, "null unless kv_connector names the class")
    kv_transfer = None
    if connector is not None:
        kv_transfer = {"kv_connector": connector, "kv_role": role, "kv_connector_module_path": module_path}
        if extra is not None:
            kv_transfer["kv_connector_extra_config"] = extra
    elif children is not None:
        raise _fail("multi_connector_children", case["multi_connector_children"], "null unless kv_connector is set")
    elif extra is not None:
        raise _fail("kv_connector_extra_config", case["kv_connector_extra_config"], "null unless kv_connector is set")
    speculative, custom_speculative = _speculative_method(case.get("speculative_method"))

    chunk = case.get("attention_chunk_size")
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk <= 0):
        raise _fail("attention_chunk_size", chunk, "null or a positive integer")
    backend = case.get("kv_offloading_backend")
    if backend is not None and backend not in OFFLOADING_BACKENDS:
        raise _fail("kv_offloading_backend", backend, f"null, {', '.join(OFFLOADING_BACKENDS[:-1])} or {OFFLOADING_BACKENDS[-1]}")
    size = case.get("kv_offloading_size")
    # vLLM's CacheConfig types the size as a float and checks nothing more (0.13.0 and 0.33.0 accept -4):
    # any number is its answer to give, not bad input.
    if size is not None and (isinstance(size, bool) or not isinstance(size, (int, float)) or size != size):
        raise _fail("kv_offloading_size", size, "null or a number (GiB)")
    layers = case.get("layers")
    if layers is not None:
        if not isinstance(layers, list) or not layers:
            raise _fail("layers", layers, f"null or a non-empty list of layer kinds ({', '.join(LAYER_KINDS)})")
        for index, kind in enumerate(layers):
            if kind not in LAYER_KINDS:
                raise _fail(f"layers[{index}]", kind, f"one of {', '.join(LAYER_KINDS)}")
    if stage == "kv_cache_groups" and layers is None:
        raise _fail("stage", stage, "kv_cache_groups only together with layers")
    return Case(
        id=case.get("id"), era=era, vllm_version=version, stage=stage, platform=platform, flag=flag,
        cli_args=cli_args, env=dict(env), kv_transfer=kv_transfer, kv_events=_bool(case, "kv_events"),
        attention_chunk_size=chunk, speculative_method=speculative, custom_speculative=custom_speculative,
        hisparse=_bool(case, "hisparse"), kv_offloading_backend=backend, kv_offloading_size=size, layers=layers,
    )


def detect_platform() -> str:
    """The platform torch runs on here: cuda (or rocm on a HIP build), xpu, else cpu."""
    import torch

    if torch.cuda.is_available():
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return "xpu"
    return "cpu"


def _apply_cli(case: Case, given: dict[str, Any]) -> None:
    """Command-line values replace the case's own fields."""
    case.flag = given["flag"]
    if "kv_transfer_config" in given:
        ktc = given["kv_transfer_config"]
        case.kv_transfer = {
            "kv_connector": ktc.get("kv_connector"),
            "kv_role": ktc.get("kv_role"),
            "kv_connector_module_path": ktc.get("kv_connector_module_path"),
            "kv_connector_extra_config": dict(ktc.get("kv_connector_extra_config") or {}),
        }
    if "kv_events_config" in given:
        case.kv_events = True
    if isinstance(given.get("speculative_config"), dict):
        case.speculative_method = given["speculative_config"].get("method")
        case.custom_speculative = None  # a command line names a method; a plugin registers custom ones
    if isinstance(given.get("hf_overrides"), dict) and "attention_chunk_size" in given["hf_overrides"]:
        case.attention_chunk_size = given["hf_overrides"]["attention_chunk_size"]
    for key in ("kv_offloading_backend", "kv_offloading_size"):
        if key in given:
            setattr(case, key, given[key])


def build_vllm_config(case: Case) -> VllmConfig:
    """Construct the VllmConfig for a case (this runs the era's resolution)."""
    ktc = None
    if case.kv_transfer is not None:
        spec = case.kv_transfer
        ktc = KVTransferConfig(
            kv_connector=spec["kv_connector"], kv_role=spec["kv_role"],
            kv_connector_module_path=spec.get("kv_connector_module_path"),
            kv_connector_extra_config=dict(spec.get("kv_connector_extra_config") or {}),
        )
    return VllmConfig(
        runtime=Runtime(era=case.era, platform=case.platform, env=case.env, vllm_version=case.vllm_version),
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


def outcome(case_id, resolved=None, warnings=(), error=None, rules=(), unknown=None, groups=None) -> dict[str, Any]:
    """An outcome dict in the schema's key order (`kv_cache_groups` only when that stage ran)."""
    result = {
        "id": case_id,
        "resolved_disable_hma": resolved,
        "warnings": list(warnings),
        "error": error,
        "rules": list(dict.fromkeys(rules)),
        "unknown": unknown,
    }
    if groups is not None:
        result["kv_cache_groups"] = groups
    return result


def group_kv_cache(case: Case, cfg: VllmConfig, res) -> list[dict]:
    """Stage kv_cache_groups: group the case's layers with the resolved flag, in the era's style."""
    from reference_impl.config.kv_cache_groups import resolve_groups  # torch is only needed for this stage

    # the seed logs W-U before failing; 0.33 fails first (config-rules.md 2.5 and 3.5)
    res.rules.append("kv_cache_groups")
    try:
        groups, _ = resolve_groups(list(case.layers), cfg.scheduler_config.disable_hybrid_kv_cache_manager, case.era.id,
                                   res.warnings)
    except ValueError as exc:
        error = HMAConfigError(str(exc), stage="kv_cache_groups", rule="kv_cache_groups")
        error.resolution = res
        raise error from None
    return groups


def run_case(case: Case) -> dict[str, Any]:
    """Run a validated case through its stages and return the outcome."""
    prefix: list[str] = []
    try:
        if case.cli_args is not None:
            given = parse_cli(case.cli_args, case.era)
            prefix.append("cli_parsed")
            _apply_cli(case, given)
            if case.stage == "cli_parse":
                return outcome(case.id, resolved=case.flag, rules=prefix)
            if given.get("speculative_config") is not None and not isinstance(given["speculative_config"], dict):
                # pydantic checks VllmConfig's fields before its __post_init__ resolves anything
                raise HMAConfigError(messages.E_SPECULATIVE_NOT_OBJECT, stage="config", vllm_type="ValidationError",
                                     rule="speculative_config_not_object")
        cfg = build_vllm_config(case)
        res = cfg.resolution
        resolved = cfg.scheduler_config.disable_hybrid_kv_cache_manager
        groups = None
        if case.layers is not None and case.stage == "config":
            res.rules.append("kv_cache_groups_not_evaluated")
        elif case.layers is not None:
            groups = group_kv_cache(case, cfg, res)
        if case.stage == "create_connector":
            create_connector(cfg, res)
        return outcome(case.id, resolved=resolved, warnings=res.warnings, rules=prefix + res.rules, groups=groups)
    except HMAConfigError as exc:
        res = getattr(exc, "resolution", None)
        error = {"type": exc.vllm_type, "message": exc.message, "stage": exc.stage}
        if res is None:
            return outcome(case.id, error=error, rules=prefix)
        return outcome(case.id, warnings=res.warnings, error=error, rules=prefix + res.rules)
    except UnknownOutcome as exc:
        if exc.rule == SUPPORT_UNKNOWN:
            known = _same_either_way(case)
            if known is not None:
                return known
        res = exc.resolution
        return outcome(case.id, warnings=res.warnings, rules=prefix + res.rules, unknown=exc.reason)


def _same_either_way(case: Case) -> dict[str, Any] | None:
    """The outcome of a case whose platform's HMA support vLLM's sources do not define (TPU from 0.14), when it
    is the same with the support True and False (e.g. an error MultiConnector's constructor raises whichever way
    the flag was resolved); None when it depends on it. The oracle and the vllm target decide the same way."""
    runs = []
    for support in (True, False):
        era = replace(case.era, platform_support=MappingProxyType({**case.era.platform_support, case.platform: support}))
        runs.append(run_case(replace(case, era=era)))
    comparable = [{key: value for key, value in run.items() if key != "rules"} for run in runs]
    if comparable[0] != comparable[1]:
        return None
    return {**runs[0], "rules": ["platform_unknown", "platform_unknown_same_outcome", *runs[0]["rules"]]}


def input_error(case_id: Any, message: str) -> dict[str, Any]:
    """The outcome for a case that does not follow the schema."""
    return outcome(case_id, error={"type": "ValueError", "message": message, "stage": "input"})


def internal_error(case_id: Any, exc: BaseException) -> dict[str, Any]:
    """The outcome of a case the resolver itself failed on (a bug in kvconform, not vLLM's answer): the
    exception on one line, so one broken case never takes a batch down with it."""
    text = " ".join(str(exc).split())
    return outcome(case_id, error={"type": "InternalError", "message": f"{type(exc).__name__}: {text}".rstrip(": "),
                                   "stage": "internal"})


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


__all__ = ["Case", "CaseError", "parse_case", "run_case", "resolve_case", "resolve_cases", "CASE_DEFAULTS", "STAGES"]
