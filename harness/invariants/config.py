"""Config invariants: what the HMA flag promises, checked on any config target's outcomes, in every era.

The contract is PR #29805's: with the flag absent the engine decides from everything it knows and never fails
*because of HMA*; `--disable-hybrid-kv-cache-manager` (flag True) means off; an explicit enable (flag False,
from the seed on) means on, or one clear error naming the cause. The invariants below are derived from that
contract, not from any era's table: an era table says what a release does, an invariant what it should do.

Each invariant is a property of one case's outcome, sometimes compared with the outcomes of related cases (the
same configuration with the flag disabled, without the connector, one stage further, ...). `evaluate` runs them
over any cases and any target (the reference resolver, or `harness.targets.config.vllm_target` on an installed
release) and returns the violations; the related cases are resolved through the same target, memoised, so a
related case that is also one of the inputs is resolved once.

In the releases before the seed the flag has two states and False is its default: there, False means "let
vLLM decide" (it is the absent flag), and an explicit enable does not exist.
"""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable

from reference_impl.config import eras as E
from reference_impl.config.case import CaseError, parse_case
from reference_impl.config.cases import apply_command_line
from reference_impl.config.errors import HMAConfigError
from reference_impl.config.factory import package_installed
from reference_impl.config.messages import E_F, E_H, E_MULTI_ASSERT
from reference_impl.config.outcome import Outcome, OutcomeShapeError
from reference_impl.config.resolution import env_flag
from reference_impl.config.vllm_cli import FLAG, parse_cli
from reference_impl.vocabulary import CASE_DEFAULTS

Target = Callable[[dict], dict]
#: an outcome: typed, or its JSON form as a target returns it
AnyOutcome = Outcome | dict

AUTO, OFF, ON = "auto", "off", "on"
CHUNKED_ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"
SIMPLE_OFFLOAD_ENV = "VLLM_USE_SIMPLE_KV_OFFLOAD"
#: An environment variable vLLM reads for something unrelated to HMA (the RPC timeout, in ms).
UNRELATED_ENV = ("VLLM_RPC_TIMEOUT", "100000")
DISABLED_KV_EVENTS = json.dumps({"enable_kv_cache_events": False})
CREATE = "create_connector"
_FLAG_SPELLING = re.compile(r"--(?:no-)?(?:enable|disable)-" + re.escape(FLAG))
_CONNECTOR_FIELDS = ("kv_connector", "kv_connector_module_path", "multi_connector_children", "kv_connector_extra_config")

# -- Errors by what they say about HMA (vLLM's texts: reference_impl.config.messages) -----------------------------

EXPLICIT_ENABLE_REJECTED = "explicit_enable_rejected"  # E-B / E-C
CONNECTOR_NOT_HMA = "connector_not_hma"  # E-F, the connector factory
MULTI_CONNECTOR_ASSERT = "multi_connector_assert"  # MultiConnector.__init__
FEATURE_REQUIRES_HMA = "feature_requires_hma"  # E-H, HiSparse
#: The errors that say "HMA is on and cannot be": what an absent or disabled flag must never produce.
HMA_ENABLED_ERRORS = frozenset({EXPLICIT_ENABLE_REJECTED, CONNECTOR_NOT_HMA, MULTI_CONNECTOR_ASSERT})
_E_F_FRAGMENT = E_F.split("{connector}")[1].split(".")[0].strip()  # "does not support HMA but HMA is enabled"
_E_H_FRAGMENT = E_H.split(";")[0].split("requires ")[1]  # "the hybrid KV cache manager"


def typed(outcome: AnyOutcome) -> Outcome:
    """`outcome` as the typed outcome (read from its JSON form once where a target's answer comes in)."""
    return outcome if isinstance(outcome, Outcome) else Outcome.from_dict(outcome)


def hma_error_kind(outcome: AnyOutcome) -> str | None:
    """What an outcome's error says about HMA (one of the kinds above), or None for any other error: the
    invariants judge what the error says, its words."""
    error = typed(outcome).error
    if not error:
        return None
    message = error.text
    if "explicitly enabled but is not supported" in message:
        return EXPLICIT_ENABLE_REJECTED
    if _E_F_FRAGMENT in message:
        return CONNECTOR_NOT_HMA
    if E_MULTI_ASSERT in message:
        return MULTI_CONNECTOR_ASSERT
    if "requires " + _E_H_FRAGMENT in message:
        return FEATURE_REQUIRES_HMA
    return None


def judged(outcome: AnyOutcome) -> bool:
    """Whether an outcome is the target's answer (not unknown, not bad input, not a failure of kvconform)."""
    outcome = typed(outcome)
    return not outcome.unknown and (outcome.error is None or outcome.error.stage not in ("input", "internal"))


def succeeded(outcome: AnyOutcome) -> bool:
    return judged(outcome) and not typed(outcome).error


def short(outcome: AnyOutcome) -> str:
    """'HMA on', 'HMA off', 'ValueError at create_connector: ...' (one line for a violation's detail)."""
    outcome = typed(outcome)
    if outcome.unknown:
        return "unknown"
    error = outcome.error
    if error:
        text = " ".join(error.text.split())
        return f"{error.type} at {error.stage}: {text[:140]}"
    return {False: "HMA on", True: "HMA off"}.get(outcome.resolved_disable_hma, "resolved ?")


def _same_answer(a: Outcome, b: Outcome) -> bool:
    """Same resolved value, or both failed."""
    if a.error or b.error:
        return bool(a.error) and bool(b.error)
    return a.resolved_disable_hma == b.resolved_disable_hma


def _signature(outcome: Outcome) -> tuple:
    error = outcome.error
    return (outcome.resolved_disable_hma, error and error.type, error and error.stage, error and error.text,
            outcome.warning_texts)


# -- Connector capability, from what the release's classes declare ----------------------------------------------

def _children(spec: dict) -> list | None:
    for key in ("children", "multi_connector_children"):
        if spec.get(key) is not None:
            return spec[key]
    return (spec.get("kv_connector_extra_config") or {}).get("connectors")


def connector_supports_hma(spec: Any, era: E.Era) -> bool | None:
    """Whether the configured connector supports HMA in `era`: its class declares SupportsHMA, and for a
    MultiConnector (or a subclass, whatever its name) every child, recursively, does too. The class is the one
    the configuration names: a module path's class when a module path is given. None when that cannot be said
    (SupportsHMA does not exist yet, an unknown name, a MultiConnector without children)."""
    if isinstance(spec, str):
        spec = {"kv_connector": spec}
    if not isinstance(spec, dict) or era.factory_check == E.FACTORY_NONE:
        return None
    name, path = spec.get("kv_connector"), spec.get("kv_connector_module_path")
    registry = era.connectors()
    if name is None:
        return None
    if path:
        try:
            cls = getattr(importlib.import_module(path), name)
            mro = {klass.__name__ for klass in cls.__mro__}
        except Exception:  # noqa: BLE001 - a class that cannot be loaded has no capability to judge
            return None
        multi = "MultiConnector" in mro
        own = registry.get("MultiConnector", False) if multi else "SupportsHMA" in mro
    else:
        if name not in registry:
            return None
        needed = era.package_imported_by(name)
        if (needed is not None and era.installed_package_is_unknown(needed)
                and package_installed(needed.package)):
            # installed here, the package supplies its own class in the registry's place, whose capability the
            # era's table does not hold (the resolver answers unknown there too)
            return None
        multi, own = name == "MultiConnector", registry[name]
    if not multi:
        return own
    if not own:
        return False
    children = _children(spec)
    if not children:
        return None
    verdicts = [connector_supports_hma(child, era) for child in children]
    if False in verdicts:
        return False
    return None if None in verdicts else True


def connector_names(spec: Any) -> list[str]:
    """Every connector name of a configuration's tree."""
    if isinstance(spec, str):
        return [spec]
    if not isinstance(spec, dict):
        return []
    names = [spec["kv_connector"]] if spec.get("kv_connector") else []
    for child in _children(spec) or ():
        names.extend(connector_names(child))
    return names


# -- A case, its outcome and its relatives -----------------------------------------------------------------------

def flag_arguments(flag: bool | None) -> list[str]:
    """The command-line spelling of a flag value that every release's parser accepts."""
    return {None: [], True: [f"--disable-{FLAG}"], False: [f"--no-disable-{FLAG}"]}[flag]


def normalized(case: dict, era: E.Era) -> tuple[dict, bool | None] | None:
    """(the case with its command line folded into fields, whether its KV events config has events disabled (None:
    no such config or not said)); None for a case the invariants do not judge (it does not follow the schema, its
    command line does not parse, a cli_parse case, a case with layers, the V0 engine). The case is read by the
    schema's one parser and its command line folded in as the resolver folds it
    (`reference_impl.config.cases.apply_command_line`); what comes back is that case's serialized form, every key
    present, which the related cases vary."""
    try:
        parsed = parse_case(case)
    except CaseError:
        return None
    if parsed.layers is not None or parsed.stage in ("cli_parse", "kv_cache_groups"):
        return None
    events_disabled = None
    if parsed.cli_args is not None:
        try:
            given = parse_cli(list(parsed.cli_args), era)
        except HMAConfigError:
            return None
        events = given.get("kv_events_config")
        if isinstance(events, dict):
            events_disabled = not events.get("enable_kv_cache_events", False)
        parsed = replace(apply_command_line(parsed, given), cli_args=None)
    if era.gated_on_vllm_use_v1 and not env_flag(dict(parsed.env), "VLLM_USE_V1", "1"):
        return None  # before 0.11.1, VLLM_USE_V1=0 runs the V0 engine: no hybrid KV cache manager, no contract
    return parsed.as_dict(), events_disabled


class Memo:
    """A target whose answers are kept by case content (the id aside): a related case that is also an input,
    or the relative of several inputs, is resolved once (and read into the typed outcome once: `typed`)."""

    def __init__(self, target: Target):
        self.target = target
        self.answers: dict[str, dict] = {}
        self._typed: dict[str, Outcome] = {}

    @staticmethod
    def _key(case: dict) -> str:
        return json.dumps({k: v for k, v in case.items() if k != "id"}, sort_keys=True, default=str)

    def __call__(self, case: dict) -> dict:
        return self._answer(self._key(case), case)

    def _answer(self, key: str, case: dict) -> dict:
        answer = self.answers.get(key)
        if answer is None:
            answer = self.answers[key] = self.target(case)
        return answer

    def typed(self, case: dict) -> Outcome:
        """The answer to `case` as the typed outcome (OutcomeShapeError for an answer that is none)."""
        key = self._key(case)  # once: the key is most of a remembered answer's cost
        found = self._typed.get(key)
        if found is None:
            found = self._typed[key] = typed(self._answer(key, case))
        return found

    def typed_or_answer(self, case: dict) -> Outcome | Any:
        """The answer to `case`, typed where it is an outcome (a broken target's other answer as it is)."""
        try:
            return self.typed(case)
        except OutcomeShapeError:
            return self(case)


def _answer(resolve: Target, case: dict) -> Outcome:
    """`resolve`'s answer to `case`, typed (through a Memo's own store where `resolve` is one)."""
    return resolve.typed(case) if isinstance(resolve, Memo) else typed(resolve(case))


@dataclass
class Probe:
    """One judged case: its fields (command line folded in), its outcome, its era and the target for relatives."""

    case: dict
    outcome: Outcome
    era: E.Era
    resolve: Target
    events_disabled: bool | None = None
    seen: list = field(default_factory=list)

    @property
    def intent(self) -> str:
        """What the user asked for: auto (absent; False too before the seed), off (True) or on (False)."""
        flag = self.case["flag"]
        if flag is True:
            return OFF
        if flag is None or not self.era.tri_state_flag:
            return AUTO
        return ON

    @property
    def platform_supported(self) -> bool | None:
        return self.era.platform_support.get(self.case["platform"])

    @property
    def connector(self) -> dict | None:
        return self.case if self.case["kv_connector"] is not None else None

    @property
    def offloading(self) -> bool:
        return self.case["kv_offloading_backend"] is not None or self.case["kv_offloading_size"] is not None

    def command_line(self) -> list[str]:
        """The case's flag and offloading options as a command line: a relative given as a command line must say
        them there (a target may read those fields from the command line alone, as vLLM's EngineArgs do)."""
        args = flag_arguments(self.case["flag"])
        if self.era.offloading_shortcut != E.OFFLOAD_ABSENT:
            for key in ("kv_offloading_backend", "kv_offloading_size"):
                if self.case[key] is not None:
                    args += [f"--{key.replace('_', '-')}", str(self.case[key])]
        return args

    def relative(self, tag: str, **changes: Any) -> Outcome:
        """The outcome of the same case with `changes` (resolved through the same target)."""
        case = {**self.case, **changes, "id": f"{self.case.get('id')}~{tag}"}
        outcome = _answer(self.resolve, case)
        self.seen.append(outcome)
        return outcome

    def resolve_other(self, tag: str, **fields: Any) -> Outcome:
        """The outcome of another case of the same release: the defaults with `fields`."""
        release = {key: self.case[key] for key in ("vllm_version", "profile")}
        case = {**CASE_DEFAULTS, **release, **fields, "id": f"{self.case.get('id')}~{tag}"}
        outcome = _answer(self.resolve, case)
        self.seen.append(outcome)
        return outcome

    def violation(self, invariant: "Invariant", detail: str) -> "Violation":
        rules = [rule for o in (self.outcome, *self.seen) for rule in o.rules]
        return Violation(invariant.id, self.case.get("id"), detail, tuple(dict.fromkeys(rules)))


@dataclass(frozen=True)
class Violation:
    """A case on which a target breaks an invariant: why, and the rules the target reported on the way (the
    reference resolver's rule ids, which tie a violation to the reviewed defect that causes it)."""

    invariant: str
    case_id: Any
    detail: str
    rules: tuple[str, ...] = ()


@dataclass(frozen=True)
class Invariant:
    """A property every correct engine has, in every release: an id, one sentence, and its check (None when the
    probe satisfies it or it does not apply, else the violation's detail)."""

    id: str
    sentence: str
    check: Callable[[Probe], str | None]


# -- The checks --------------------------------------------------------------------------------------------------

def _absent_never_hma_error(p: Probe) -> str | None:
    kind = hma_error_kind(p.outcome)
    if p.intent == AUTO and kind in HMA_ENABLED_ERRORS:
        return f"flag absent, yet {short(p.outcome)}"
    return None


def _absent_never_worse_than_disabled(p: Probe) -> str | None:
    if p.intent != AUTO:
        return None
    disabled = p.relative("flag-true", flag=True, stage=CREATE)
    if not succeeded(disabled):
        return None
    absent = p.relative("created", stage=CREATE)
    if judged(absent) and absent.error:
        return f"with --disable-{FLAG} it runs through connector creation; flag absent: {short(absent)}"
    return None


def _disabled_is_off(p: Probe) -> str | None:
    if p.intent != OFF:
        return None
    if succeeded(p.outcome) and p.outcome.resolved_disable_hma is not True:
        return f"--disable-{FLAG} given, yet {short(p.outcome)}"
    if hma_error_kind(p.outcome) in HMA_ENABLED_ERRORS:
        return f"--disable-{FLAG} given, yet {short(p.outcome)}"
    return None


def _enabled_is_on(p: Probe) -> str | None:
    if p.intent == ON and succeeded(p.outcome) and p.outcome.resolved_disable_hma is not False:
        return f"HMA explicitly enabled and no error, yet {short(p.outcome)}"
    return None


def _causes(p: Probe) -> dict[str, list[str]]:
    """What in the case can stand against HMA, each with the words an error naming it would use. A new input that
    can stand against HMA belongs here: tests/test_invariant_causes.py resolves every case key's value on its own in
    every era and fails on one that keeps HMA off with nothing named here."""
    case, causes = p.case, {}
    if p.platform_supported is False:
        causes["platform"] = ["platform", case["platform"]]
    if case["kv_events"]:
        causes["KV events"] = ["event"]
    if case["attention_chunk_size"]:
        causes["chunked local attention"] = ["chunk"]
    method = case["speculative_method"]
    if method:
        name = method["name"] if isinstance(method, dict) else method
        causes["speculative decoding"] = ["speculat", "eagle", "mtp", "draft", str(name).lower()]
    if p.connector or p.offloading:
        causes["connector"] = ["connector", *(name.lower() for name in connector_names(case))]
    if case["hisparse"]:
        causes["HiSparse"] = ["hisparse"]
    return causes


def _enable_error_names_cause(p: Probe) -> str | None:
    if p.intent != ON or hma_error_kind(p.outcome) not in HMA_ENABLED_ERRORS:
        return None
    causes = _causes(p)
    text = p.outcome.error.text.lower().replace("_", " ").replace("-", " ")
    if not causes or any(word.replace("_", " ").replace("-", " ") in text for words in causes.values() for word in words):
        return None
    return f"the error names none of the causes present ({', '.join(causes)}): {short(p.outcome)}"


def _disabled_kv_events_irrelevant(p: Probe) -> str | None:
    if not p.case["kv_events"] or p.events_disabled is False:
        return None
    without = p.relative("no-kv-events", kv_events=False)
    disabled = p.relative("kv-events-disabled", kv_events=False, cli_args=[
        *p.command_line(), "--kv-events-config", DISABLED_KV_EVENTS])
    if judged(without) and judged(disabled) and not _same_answer(without, disabled):
        return (f"without a KV events config: {short(without)}; with one whose events are disabled: "
                f"{short(disabled)}")
    return None


def _offloading_connector(p: Probe) -> str | None:
    """The connector the offloading shortcut stands for in this era, or None when the case has no shortcut."""
    era, case = p.era, p.case
    if era.offloading_shortcut == E.OFFLOAD_ABSENT or p.connector is not None:
        return None
    backend, size = case["kv_offloading_backend"], case["kv_offloading_size"]
    if size is None or (not era.offloading_needs_size and backend is None):
        # the size is what the shortcut needs in every era: where the backend triggers it (0.11.1 - 0.13.x) a
        # backend without a size is refused by the shortcut itself (E-OFFLOAD-NO-SIZE), it stands for no connector
        return None
    backend = backend or "native"
    name = era.offloading_connectors.get(backend)
    if era.simple_offload_env and backend == "native" and (case["env"] or {}).get(SIMPLE_OFFLOAD_ENV, "0").strip() not in ("", "0"):
        name = "SimpleCPUOffloadConnector"
    return name


def _offloading_is_its_connector(p: Probe) -> str | None:
    name = _offloading_connector(p)
    if name is None:
        return None
    shortcut = p.relative("created", stage=CREATE)
    explicit = p.relative("offload-as-connector", stage=CREATE, kv_offloading_backend=None, kv_offloading_size=None,
                          kv_connector=name, kv_role="kv_both")
    if judged(shortcut) and judged(explicit) and not _same_answer(shortcut, explicit):
        return f"the offloading flags give {short(shortcut)}; the {name} they stand for gives {short(explicit)}"
    return None


def _without_connector(p: Probe, stage: str) -> dict:
    return p.relative(f"no-connector-{stage}", stage=stage, kv_role="kv_both",
                      **{key: None for key in _CONNECTOR_FIELDS})


def _hma_connector_never_disables(p: Probe) -> str | None:
    if p.intent != AUTO or p.connector is None or p.offloading or connector_supports_hma(p.case, p.era) is not True:
        return None
    with_it = p.relative("config", stage="config")
    without = _without_connector(p, "config")
    if succeeded(with_it) and succeeded(without) and with_it.resolved_disable_hma and not without.resolved_disable_hma:
        return f"{p.case['kv_connector']} supports HMA, yet it turns HMA off (without it: {short(without)})"
    return None


def _hma_connector_created_when_enabled(p: Probe) -> str | None:
    if p.intent != ON or p.connector is None or p.offloading or connector_supports_hma(p.case, p.era) is not True:
        return None
    created = p.relative("created", stage=CREATE)
    if hma_error_kind(created) in (CONNECTOR_NOT_HMA, MULTI_CONNECTOR_ASSERT):
        return f"{p.case['kv_connector']} supports HMA, yet creating it with HMA enabled gives {short(created)}"
    return None


def _non_hma_connector_never_on(p: Probe) -> str | None:
    if p.intent != AUTO or p.connector is None or p.offloading or connector_supports_hma(p.case, p.era) is not False:
        return None
    if succeeded(p.outcome) and p.outcome.resolved_disable_hma is False:
        return f"{p.case['kv_connector']} does not support HMA (a class or child without SupportsHMA), yet HMA is on"
    return None


def _unsupported_platform_never_on(p: Probe) -> str | None:
    if p.platform_supported is False and succeeded(p.outcome) and p.outcome.resolved_disable_hma is False:
        return f"platform {p.case['platform']} does not support HMA, yet HMA is on"
    return None


def _irrelevant_inputs(p: Probe) -> str | None:
    case = p.case
    if case["stage"] != "config":  # one stage is enough: INV-CFG-16 ties the stages together
        return None
    variants = {"unrelated-env": {"env": {**(case["env"] or {}), UNRELATED_ENV[0]: UNRELATED_ENV[1]}}}
    if p.connector is not None and case["kv_role"] in ("kv_both", "kv_producer", "kv_consumer"):
        variants["kv-role"] = {"kv_role": "kv_producer" if case["kv_role"] == "kv_both" else "kv_both"}
    if case["attention_chunk_size"]:
        variants["chunk-size"] = {"attention_chunk_size": case["attention_chunk_size"] * 2}
    size = case["kv_offloading_size"]
    if isinstance(size, (int, float)) and size > 0:
        variants["offload-size"] = {"kv_offloading_size": size * 2}
    for tag, changes in variants.items():
        other = p.relative(tag, **changes)
        if judged(other) and _signature(other) != _signature(p.outcome):
            return f"changing only {tag.replace('-', ' ')} turns {short(p.outcome)} into {short(other)}"
    return None


def _named_spellings_exist(p: Probe) -> str | None:
    texts = [*p.outcome.warning_texts, p.outcome.error.text if p.outcome.error else ""]
    for spelling in dict.fromkeys(s for text in texts for s in _FLAG_SPELLING.findall(text)):
        parsed = p.resolve_other(f"spelling{spelling}", stage="cli_parse", cli_args=[spelling])
        if judged(parsed) and parsed.error:
            return f"a message tells the user about {spelling}, which this release's command line refuses"
    return None


def _mentions_hma(text: str) -> bool:
    lowered = text.lower()
    return "hybrid kv cache manager" in lowered or "hma" in lowered


def _disable_is_explained(p: Probe) -> str | None:
    if p.intent != AUTO or p.platform_supported is not True or not succeeded(p.outcome):
        return None
    if p.outcome.resolved_disable_hma is True and not any(_mentions_hma(w) for w in p.outcome.warning_texts):
        return "HMA turned off on a platform that supports it, with no warning saying so"
    return None


_TURNING_OFF = ("turning off hybrid kv cache manager", "disabling it")


def _disable_warning_truthful(p: Probe) -> str | None:
    if not succeeded(p.outcome) or p.outcome.resolved_disable_hma is not False:
        return None
    for text in p.outcome.warning_texts:
        if _mentions_hma(text) and any(words in text.lower() for words in _TURNING_OFF):
            return f"a warning says HMA is turned off, yet HMA is on: {' '.join(text.split())[:120]}"
    return None


def _stages_agree(p: Probe) -> str | None:
    if p.case["stage"] != "config":
        return None
    created = p.relative("created", stage=CREATE)
    if not judged(created):
        return None
    error = p.outcome.error
    if error:
        other = created.error
        if other is None or (other.type, other.text) != (error.type, error.text):
            return f"fails at config ({short(p.outcome)}), but run to connector creation: {short(created)}"
    elif succeeded(created) and created.resolved_disable_hma != p.outcome.resolved_disable_hma:
        return f"config resolves {short(p.outcome)}, connector creation {short(created)}"
    return None


def _env_opt_in_honoured(p: Probe) -> str | None:
    case = p.case
    if (not p.era.chunked_env_var or not case["attention_chunk_size"] or case["speculative_method"]
            or (case["env"] or {}).get(CHUNKED_ENV, "").strip() != "1"):
        return None
    env = {k: v for k, v in case["env"].items() if k != CHUNKED_ENV}
    without = p.relative("no-chunked", attention_chunk_size=None, env=env or None)
    if judged(without) and not _same_answer(without, p.outcome):
        return f"{CHUNKED_ENV}=1 given, yet chunked local attention turns {short(without)} into {short(p.outcome)}"
    return None


INVARIANTS: tuple[Invariant, ...] = (
    Invariant("INV-CFG-01", "With the flag absent, the configuration never fails with an error that HMA is on and "
              "cannot be (an explicit-enable rejection, \"does not support HMA but HMA is enabled\", MultiConnector's "
              "HMA assertion).", _absent_never_hma_error),
    Invariant("INV-CFG-02", "With the flag absent, a configuration never fails where the same configuration with "
              "--disable-hybrid-kv-cache-manager runs through connector creation.", _absent_never_worse_than_disabled),
    Invariant("INV-CFG-03", "With --disable-hybrid-kv-cache-manager, HMA resolves off and no error says HMA is on.",
              _disabled_is_off),
    Invariant("INV-CFG-04", "With HMA explicitly enabled, a configuration that raises no error resolves HMA on.",
              _enabled_is_on),
    Invariant("INV-CFG-05", "When an explicit enable cannot be honoured, the error names the cause present (the "
              "platform, KV events, chunked local attention, the speculator or the connector).",
              _enable_error_names_cause),
    Invariant("INV-CFG-06", "A KV events config whose events are disabled is no reason to turn HMA off or to refuse "
              "an explicit enable: the outcome is that without it.", _disabled_kv_events_irrelevant),
    Invariant("INV-CFG-07", "--kv-offloading-backend/--kv-offloading-size resolve HMA as the connector they stand for "
              "would: the shortcut is applied before the HMA decision.", _offloading_is_its_connector),
    Invariant("INV-CFG-08", "With the flag absent, a connector that supports HMA (its class declares SupportsHMA; a "
              "MultiConnector's children too) is never the reason HMA turns off.", _hma_connector_never_disables),
    Invariant("INV-CFG-09", "With HMA explicitly enabled, a connector that supports HMA (a MultiConnector whose class "
              "and children all do, included) is created without an HMA error.", _hma_connector_created_when_enabled),
    Invariant("INV-CFG-10", "With the flag absent, HMA never resolves on with a connector that does not support it "
              "(a MultiConnector with such a child included, whatever its class is called).", _non_hma_connector_never_on),
    Invariant("INV-CFG-11", "On a platform without HMA support, HMA never resolves on.", _unsupported_platform_never_on),
    Invariant("INV-CFG-12", "Inputs that are not HMA inputs (the connector's kv_role, an unrelated environment "
              "variable, the chunk size's or the offloading size's value) never change the outcome.", _irrelevant_inputs),
    Invariant("INV-CFG-13", "A message that tells the user to pass or omit an HMA flag names a spelling this "
              "release's command line accepts.", _named_spellings_exist),
    Invariant("INV-CFG-14", "With the flag absent on a platform that supports HMA, HMA turns off only with a warning "
              "that says so.", _disable_is_explained),
    Invariant("INV-CFG-15", "A warning that says HMA is being turned off is never logged when HMA ends up on.",
              _disable_warning_truthful),
    Invariant("INV-CFG-16", "Going on to connector creation never changes the HMA decision: an error at config is "
              "the same error at creation, and a value resolved at config stays.", _stages_agree),
    Invariant("INV-CFG-17", "With chunked local attention, no speculator and "
              "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1, chunked attention is no reason to turn HMA off.",
              _env_opt_in_honoured),
)
INVARIANTS_BY_ID: dict[str, Invariant] = {inv.id: inv for inv in INVARIANTS}


def era_of(case: dict) -> E.Era | None:
    """The era a case names (its vllm_version or profile; the default profile without either)."""
    try:
        return E.resolve_era(case.get("vllm_version") or case.get("profile"))[0]
    except ValueError:
        return None


def probe(case: dict, outcome: AnyOutcome, resolve: Target) -> Probe | None:
    """The probe of one judged case, or None when the invariants do not judge it."""
    era = era_of(case)
    if era is None or not isinstance(outcome, (dict, Outcome)):
        return None
    outcome = typed(outcome)
    if not judged(outcome):
        return None
    folded = normalized(case, era)
    if folded is None:
        return None
    fields, events_disabled = folded
    return Probe(fields, outcome, era, resolve, events_disabled)


def check_case(case: dict, outcome: AnyOutcome, resolve: Target,
               invariants: Iterable[Invariant] = INVARIANTS) -> list[Violation]:
    """The violations of one case whose outcome is known; relatives go through `resolve`."""
    if isinstance(outcome, dict):
        try:
            outcome = typed(outcome)
        except OutcomeShapeError:  # a broken target's answer: nothing to judge
            return []
    p = probe(case, outcome, resolve)
    if p is None:
        return []
    found = []
    for invariant in invariants:
        p.seen = []  # each invariant's relatives are its own (their rules go with its violation)
        detail = invariant.check(p)
        if detail is not None:
            found.append(p.violation(invariant, detail))
    return found


def evaluate(cases: Iterable[dict], target: Target, invariants: Iterable[Invariant] = INVARIANTS) -> list[Violation]:
    """Every violation of `invariants` by `target` on `cases` (the target memoised for the related cases)."""
    resolve = target if isinstance(target, Memo) else Memo(target)
    return evaluate_answered([(case, resolve.typed_or_answer(case)) for case in cases], resolve, invariants)


def evaluate_answered(answered: list[tuple[dict, Any]], resolve: Memo,
                      invariants: Iterable[Invariant] = INVARIANTS) -> list[Violation]:
    """`evaluate` on cases already answered through `resolve`: (case, its typed outcome or other answer) pairs."""
    invariants = tuple(invariants)
    found: list[Violation] = []
    for case, outcome in answered:
        found.extend(check_case(case, outcome, resolve, invariants))
    return found
