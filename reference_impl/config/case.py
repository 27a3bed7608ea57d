"""One case of the config schema (docs/reference.md, "The resolve schema"), parsed and validated once.

A case is what `kvconform resolve`, the config matrix, the random cases and `explain` hand to a config target: a
JSON object whose keys and defaults are the vocabulary's (`reference_impl.vocabulary.CASE_DEFAULTS`). `parse_case`
turns it into a `Case`, typed and frozen, or raises `CaseError` naming the field, the value and what is accepted.
The reference resolver (`reference_impl.config.cases`), the oracle (`suites.config.oracle`) and the vLLM target
(`harness.targets.config.vllm_target`) all take a `Case`: a new key is declared in the vocabulary (`CASE_KEYS`:
its default, kind and accepted values); a key of a simple kind is then parsed here from that record alone (its
typed field of `Case` is the one line it adds), a structured one gets its own parse; and each evaluator reads the
typed field where it gives the key meaning.

Words and shapes, never rules: what an era does with a case is the resolver's (and, independently, the oracle's
tables'); this module only resolves the release a case names to its era id (`eras.resolve_era`, the ranges' one
home, which is why it lives in this package: `tests/test_import_cycles.py`) and writes the connector the way vLLM
reads a `kv_transfer_config` (MultiConnector children in its extra config's "connectors" list).
`Case.as_dict()` is the serialized form again: `parse_case(case.as_dict()) == case`.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Mapping

from reference_impl.config.eras import BUILTIN_SPECULATIVE_METHODS, resolve_era
from reference_impl.vocabulary import (AUTO_PLATFORM, CASE_DEFAULTS, CASE_KEYS, ENV_VARS, LAYER_KINDS, PLATFORM_CHOICES,
                                       STAGES, CaseKey)

#: The keys whose vocabulary record validates them (`CaseKey.simple`): each a field of `Case` of the same name.
SIMPLE_KEYS: tuple[str, ...] = tuple(key for key, spec in CASE_KEYS.items() if spec.simple)


class CaseError(ValueError):
    """A case that does not follow the schema; the message names the field, the value and what is accepted."""


def _fail(field_name: str, value: Any, accepted: str) -> CaseError:
    return CaseError(f"{field_name}: {value!r} is not accepted; expected {accepted}")


@dataclass(frozen=True)
class Case:
    """A validated case: every key of the schema with its default filled in, in the shapes the evaluators read.

    `kv_transfer` is the connector as vLLM reads a `kv_transfer_config` (`kv_connector`, `kv_role`,
    `kv_connector_module_path`, and `kv_connector_extra_config` when given, whose "connectors" list holds the
    MultiConnector children, each in the same shape); None without a connector. It is shared, not copied: an
    evaluator that hands it on copies it first.
    """

    # A key of a simple kind (`SIMPLE_KEYS`) is parsed from its vocabulary record and written back by `as_dict`
    # without code of its own here; its typed field below is the one line a new such key adds to this module.
    id: Any
    #: the era id of the release the case names (the default profile's when it names none)
    era: str
    #: the release: the version the case gives, or its profile's or era's representative release
    vllm_version: str
    #: ("vllm_version" or "profile", the text) the case named its release by; None: it names none
    release_selector: tuple[str, str] | None
    stage: str
    #: a platform of `PLATFORMS` ("auto" is resolved to the machine's when the case is parsed)
    platform: str
    flag: bool | None
    cli_args: tuple[str, ...] | None
    env: Mapping[str, str]
    kv_transfer: dict[str, Any] | None
    kv_events: bool
    attention_chunk_size: int | None
    #: the speculative method's name, built in or custom
    speculative_method: str | None
    #: a custom speculative method's `uses_target_hidden_states`; None when the method is a built-in name
    custom_speculative: bool | None
    hisparse: bool
    kv_offloading_backend: str | None
    kv_offloading_size: float | None
    layers: tuple[str, ...] | None

    @property
    def kv_connector(self) -> str | None:
        """The top-level connector's name (None without a connector)."""
        return None if self.kv_transfer is None else self.kv_transfer["kv_connector"]

    def connector_names(self) -> set[str]:
        """Every connector name the case configures, MultiConnector children at any depth included."""
        names: set[str] = set()
        pending = [self.kv_transfer] if self.kv_transfer is not None else []
        while pending:
            config = pending.pop()
            if config.get("kv_connector"):
                names.add(config["kv_connector"])
            pending.extend((config.get("kv_connector_extra_config") or {}).get("connectors") or ())
        return names

    def as_dict(self) -> dict[str, Any]:
        """The case in the schema's serialized form, every key present (children written in the extra config's
        "connectors" list, a custom speculative method as its object)."""
        out = dict(CASE_DEFAULTS)
        if self.release_selector is not None:
            out[self.release_selector[0]] = self.release_selector[1]
        transfer = self.kv_transfer or {}
        method: Any = self.speculative_method
        if self.custom_speculative is not None:
            method = {"name": self.speculative_method, "uses_target_hidden_states": self.custom_speculative}
        out.update(
            id=self.id, stage=self.stage, flag=self.flag, platform=self.platform,
            cli_args=list(self.cli_args) if self.cli_args is not None else None,
            kv_connector=transfer.get("kv_connector"),
            kv_connector_module_path=transfer.get("kv_connector_module_path"),
            kv_role=transfer.get("kv_role", CASE_DEFAULTS["kv_role"]),
            kv_connector_extra_config=transfer.get("kv_connector_extra_config"), speculative_method=method,
            env=dict(self.env) or None, layers=list(self.layers) if self.layers is not None else None,
            **{key: getattr(self, key) for key in SIMPLE_KEYS},
        )
        return out


# -- parsing, field by field ----------------------------------------------------------------------------------------

def _opt_str(case: dict, key: str) -> str | None:
    value = case.get(key)
    if value is not None and not isinstance(value, str):
        raise _fail(key, value, "a string or null")
    return value


def _simple(case: dict, key: str, spec: CaseKey) -> Any:
    """A key of a simple kind, checked against its vocabulary record (`CaseKey`): its value, or its default."""
    value = case.get(key, spec.default)
    if spec.kind == "bool":
        ok = isinstance(value, bool)
    elif value is None:
        ok = True
    elif spec.kind == "choice":
        ok = value in spec.choices
    elif spec.kind == "positive_int":
        ok = not isinstance(value, bool) and isinstance(value, int) and value > 0
    else:  # "number"; NaN is no number a flag can carry
        ok = not isinstance(value, bool) and isinstance(value, (int, float)) and value == value
    if not ok:
        raise _fail(key, value, spec.accepted())
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
        # factory raise), not bad input: the evaluators report it at the stage vLLM would.
        entry = {k: child.get(k) for k in ("kv_connector", "kv_role")}
        if child.get("kv_connector_module_path") is not None:  # a name alone is the same child as {"kv_connector": name}
            entry["kv_connector_module_path"] = child["kv_connector_module_path"]
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
    if name in BUILTIN_SPECULATIVE_METHODS:
        # vLLM's register_speculative_method refuses a built-in name
        raise _fail("speculative_method.name", name, "a name that is not a built-in speculative method")
    uses = value.get("uses_target_hidden_states", False)
    if not isinstance(uses, bool):
        raise _fail("speculative_method.uses_target_hidden_states", uses, "true or false")
    return name, uses


def _release(case: dict) -> tuple[str, str, tuple[str, str] | None]:
    """(era id, release version, the selector the case gave) from `vllm_version`, else `profile`."""
    key = "vllm_version" if case.get("vllm_version") is not None else "profile"
    value = case.get(key)
    try:
        era, version = resolve_era(value)
    except ValueError as exc:
        raise CaseError(str(exc).replace("vllm_version:", f"{key}:", 1)) from None
    return era.id, version, (key, value) if value is not None else None


def parse_case(case: Any) -> Case:
    """Validate one case dict into a `Case`; raises CaseError naming the offending field."""
    if not isinstance(case, dict):
        raise _fail("case", case, "a JSON object")
    unknown = [key for key in case if key not in CASE_DEFAULTS]
    if unknown:
        accepted = ", ".join(CASE_DEFAULTS)
        raise _fail(unknown[0], case[unknown[0]], f"a known key ({accepted})")
    era, version, selector = _release(case)
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
    if module_path is not None and connector is None:
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

    # kv_offloading_size: vLLM's CacheConfig types the size as a float and checks nothing more (0.13.0 and 0.33.0
    # accept -4): any number is its answer to give, not bad input.
    simple = {key: _simple(case, key, CASE_KEYS[key]) for key in SIMPLE_KEYS}
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
        id=case.get("id"), era=era, vllm_version=version, release_selector=selector, stage=stage, platform=platform,
        flag=flag, cli_args=tuple(cli_args) if cli_args is not None else None, env=MappingProxyType(dict(env)),
        kv_transfer=kv_transfer, speculative_method=speculative, custom_speculative=custom_speculative,
        layers=tuple(layers) if layers is not None else None, **simple,
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
