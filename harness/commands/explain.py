"""`kvconform explain`: what a vLLM release does with a command line, in plain words or as JSON."""

from __future__ import annotations

import difflib
import importlib.util
import json

from harness.errors import UsageError, choice_ignoring_case, did_you_mean
from harness.invariants.defects import defects_of
from reference_impl.config.case import Case, parse_case
from reference_impl.config import cases as C
from reference_impl.config.eras import (ERAS, ERAS_BY_ID, PROFILES, VLLM_REGISTERED_CONNECTORS, parse_version,
                                         resolve_era)
from reference_impl.config.errors import HMAConfigError
from reference_impl.config.factory import KVConnectorFactory, packages_assumed_installed
from reference_impl.config.outcome import Outcome
from reference_impl.config.rules import RULES
from reference_impl.config.vllm_cli import build_parser as vllm_parser, normalise
from reference_impl.releases import version_order_key
from reference_impl.vocabulary import CASE_DEFAULTS, LAYER_KINDS, PLATFORM_CHOICES, STAGES

# The stages explain can stop after: it parses the command line itself, so every stage after cli_parse.
_STAGES = STAGES[STAGES.index("cli_parse") + 1:]
_STAGE_WORDS = f"{', '.join(_STAGES[:-1])} or {_STAGES[-1]}"

HELP = "explain how a vLLM release resolves the HMA flag for a command line"

# Without --vllm-version explain answers for the newest release it knows, and says so.
NEWEST_RELEASE = ERAS[-1].representative

# `--exit-code`: the outcome as an exit status, for scripts that gate on it (docs/reader.md, "explain").
EXIT_HMA_ON, EXIT_HMA_OFF, EXIT_ERROR, EXIT_UNKNOWN = 0, 10, 11, 12


def register(subparsers) -> None:
    """Add the `explain` subcommand."""
    parser = subparsers.add_parser(
        "explain",
        help=HELP,
        usage="kvconform explain [OPTIONS] [VLLM_FLAGS ...]",
        description=(
            "Explain how a vLLM release resolves the hybrid KV cache manager flag (HMA) for a command line: the\n"
            "result, the warnings vLLM logs and the rules that fired.\n\n"
            "Every option that is not one of explain's own is read as a vLLM flag, e.g.\n"
            "  kvconform explain --vllm-version 0.13.0 --no-disable-hybrid-kv-cache-manager \\\n"
            "      --kv-transfer-config '{\"kv_connector\": \"LMCacheConnectorV1\", \"kv_role\": \"kv_both\"}'\n"
            "An option that looks like a misspelling of one of explain's own (--platfrom) is refused."
        ),
        epilog=(f"exit status: 0 answered (with --exit-code: {EXIT_HMA_ON} HMA enabled, {EXIT_HMA_OFF} HMA disabled, "
                f"{EXIT_ERROR} vLLM raises an error,\n{EXIT_UNKNOWN} the outcome cannot be known); 2 usage error"),
        allow_abbrev=False,
    )
    parser.add_argument("--vllm-version", default=None,
                        help=f"X.Y.Z, an era id, or a profile ({', '.join(PROFILES)}); default {NEWEST_RELEASE}, "
                             "the newest release kvconform knows")
    platform = CASE_DEFAULTS["platform"]
    parser.add_argument("--platform", default=platform, help=f"one of {', '.join(PLATFORM_CHOICES)} (default {platform})")
    parser.add_argument("--attention-chunk-size", type=int, default=None, help="the model's chunked local attention size")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VAL", help="environment variable vLLM reads (repeatable)")
    parser.add_argument("--layers", default=None, metavar="KINDS",
                        help=f"comma-separated layer spec kinds ({', '.join(LAYER_KINDS)}): adds the kv_cache_groups stage")
    parser.add_argument("--stage", default=_STAGES[-1], help=f"stop after this stage: {_STAGE_WORDS} (default)")
    parser.add_argument("--installed", default=None, metavar="PKG[==VERSION],...",
                        help=f"answer for a deployment where these optional packages are installed ("
                             f"{', '.join(OPTIONAL_PACKAGES)}; without a version: the newest one kvconform has "
                             "facts on); by default a package counts as installed when this Python can import it")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of plain words")
    parser.add_argument("--exit-code", action="store_true",
                        help=f"exit {EXIT_HMA_ON} when HMA ends up enabled, {EXIT_HMA_OFF} disabled, {EXIT_ERROR} on a vLLM error, "
                             f"{EXIT_UNKNOWN} when the outcome cannot be known")
    parser.set_defaults(run=run, accepts_extra=True, own_options=_own_options(parser))


# The optional packages a built-in connector's module imports (lmcache, mooncake), with the import facts.
_PACKAGE_IMPORTS = {}
for _info in VLLM_REGISTERED_CONNECTORS:
    if _info.imports is not None:
        _PACKAGE_IMPORTS.setdefault(_info.imports.package, []).append(_info.imports)
OPTIONAL_PACKAGES = tuple(sorted(_PACKAGE_IMPORTS))


def parse_installed(text: str | None) -> dict[str, str | None]:
    """`--installed lmcache==0.5.6,mooncake` -> {"lmcache": "0.5.6", "mooncake": None}; a package kvconform
    models no import of is a usage error naming the ones it does."""
    if text is None:
        return {}
    installed: dict[str, str | None] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, version = item.partition("==")
        name = name.strip().lower()
        if name not in _PACKAGE_IMPORTS:
            close = did_you_mean(name, OPTIONAL_PACKAGES)
            meant = f"did you mean {close}? " if close else ""
            raise UsageError(f"kvconform explain: --installed: {item!r} is not accepted; {meant}(accepted: "
                             f"{', '.join(OPTIONAL_PACKAGES)}, each optionally ==VERSION, comma-separated)")
        if sep and not version.strip():
            raise UsageError(f"kvconform explain: --installed: {item!r} has no version after '=='")
        installed[name] = version.strip() if sep else None
    if not installed:
        raise UsageError(f"kvconform explain: --installed: {text!r} names no package (accepted: {', '.join(OPTIONAL_PACKAGES)})")
    return installed


def assumed_versions(installed: dict[str, str | None]) -> dict[str, str | None]:
    """Each package's version, a missing one filled with the newest version kvconform has a fact on."""
    out = {}
    for name, version in installed.items():
        known = [v for imports in _PACKAGE_IMPORTS[name] if (v := imports.newest_known_version())]
        out[name] = version or (max(known, key=version_order_key) if known else None)
    return out


def installed_line(given: dict[str, str | None], assumed: dict[str, str | None], rules: list[str]) -> str:
    """The assumption explain answered under, in words ('' when no optional package took part)."""
    if not assumed:
        if not {"package_missing", "package_installed"} & set(rules):
            return ""
        return ("optional packages: as this Python finds them (" + ", ".join(
            f"{name} {'importable' if importlib.util.find_spec(name) else 'not installed'}"
            for name in OPTIONAL_PACKAGES) + "); --installed PKG answers for a deployment that has one")
    parts = []
    for name, version in assumed.items():
        if given[name]:
            parts.append(f"{name} {version}")
        elif version:
            parts.append(f"{name} {version} (no version given: the newest kvconform has facts on)")
        else:
            parts.append(f"{name} (no version given, and kvconform has facts on none)")
    return "assumed installed (--installed): " + ", ".join(parts)


def _own_options(parser) -> tuple[str, ...]:
    return tuple(option for action in parser._actions for option in action.option_strings if option.startswith("--"))


def check_misspelled(extra: list[str], own: tuple[str, ...]) -> None:
    """Refuse a vLLM flag that looks like one of explain's own options misspelled or abbreviated: it would
    otherwise be answered silently on the defaults."""
    for token in extra:
        if not token.startswith("--") or token == "--":
            continue
        name = token.split("=", 1)[0]
        if name in own:
            continue
        close = [option for option in own if option.startswith(name)] or difflib.get_close_matches(name, own, n=1, cutoff=0.75)
        if close:
            raise UsageError(f"kvconform explain: unrecognized option {name}; did you mean {close[0]}?")


def _choice(option: str, value: str, choices) -> str:
    """An option's value as one of its choices, ignoring case where that is unambiguous; a near miss is
    refused with the choice it resembles. Anything else is left to the case's own check, which lists what is
    accepted."""
    chosen = choice_ignoring_case(value, choices)
    if chosen is not None:
        return chosen
    close = did_you_mean(value, choices)
    if close is not None:
        raise UsageError(f"kvconform explain: {option}: {value!r} is not accepted; did you mean {close}? "
                         f"(accepted: {', '.join(choices)})")
    return value


def normalise_choices(args) -> None:
    """--platform, --stage, --layers and --vllm-version read case-insensitively (`Cuda`, `V0.34`), with a
    did-you-mean for a near miss (`cdua`, `seeed`)."""
    args.platform = _choice("--platform", args.platform, PLATFORM_CHOICES)
    args.stage = _choice("--stage", args.stage, _STAGES)
    if args.layers:
        args.layers = ",".join(_choice("--layers", kind, LAYER_KINDS) for kind in args.layers.split(","))
    if args.vllm_version is not None:
        try:
            parse_version(args.vllm_version.lower())
            args.vllm_version = args.vllm_version.lower()
        except ValueError:
            args.vllm_version = _choice("--vllm-version", args.vllm_version, tuple(dict.fromkeys([*PROFILES, *ERAS_BY_ID])))


def refuse_unrecognized(parsed: Case) -> None:
    """An argument the release's `vllm serve` does not take is a usage error (one line, exit 2), not an
    answer: it names the release explain used, and the releases that do take the option, or what explain
    reads when no release does (explain models only the HMA-related flags)."""
    try:
        _, unknown = vllm_parser(ERAS_BY_ID[parsed.era]).parse_known_args(normalise(list(parsed.cli_args or ())))
    except HMAConfigError:  # a value vLLM's parser refuses: that is vLLM's answer, the case reports it
        return
    if not unknown:
        return
    token = unknown[0]
    name = token.split("=", 1)[0]
    accepting = [era for era in ERAS if name in vllm_parser(era)._option_string_actions]
    if accepting:
        ranges = f"vLLM {accepting[0].representative} and later" if accepting[-1] is ERAS[-1] else \
            f"vLLM {accepting[0].representative} to {accepting[-1].representative}"
        raise UsageError(f"kvconform explain: vLLM {parsed.vllm_version} does not accept {name} (its `vllm serve` "
                         f"exits 2: unrecognized arguments); {ranges} do; --vllm-version picks the release")
    options = sorted({o for era in ERAS for o in vllm_parser(era)._option_string_actions if o.startswith("--")})
    close = did_you_mean(name, options) if name.startswith("-") else None
    hint = f"did you mean {close}?" if close else f"the vLLM flags it reads: {', '.join(options)}"
    what = f"{name} is not a vLLM flag explain reads" if name.startswith("-") else f"unexpected argument {token!r}"
    raise UsageError(f"kvconform explain: {what}; {hint}")


def exit_code_of(result: dict) -> int:
    """The `--exit-code` status of an outcome."""
    if result["error"]:
        return EXIT_ERROR
    if result["unknown"]:
        return EXIT_UNKNOWN
    return EXIT_HMA_ON if result["resolved_disable_hma"] is False else EXIT_HMA_OFF


def hints(parsed: Case) -> list[str]:
    """Extra lines that help a user read the answer (never part of the outcome)."""
    lines = []
    era = ERAS_BY_ID[parsed.era]
    for name in C.unregistered_names(C.command_line_applied(parsed).kv_transfer, era):
        registry = ", ".join(sorted(era.connectors()))
        close = did_you_mean(name, sorted(era.connectors()), cutoff=0.85)  # FooConnector is no Mooncake one
        meant = f"did you mean {close!r} (names are case-sensitive)? " if close else ""
        lines.append(f"hint: vLLM {parsed.vllm_version} registers no connector {name!r}; {meant}its registry: {registry}")
        own = KVConnectorFactory.registered_names()
        if own:
            lines.append(f"hint: kvconform's reference engine also registers its own: {', '.join(own)}")
    return lines


def _env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"kvconform explain: --env: {pair!r} is not accepted; expected KEY=VALUE")
        env[key] = value
    return env


def build_case(args) -> dict:
    """The `resolve` case an explain command line describes."""
    return {
        "id": "explain",
        "vllm_version": args.vllm_version,
        "stage": args.stage,
        "cli_args": list(args.extra),
        "platform": args.platform,
        "attention_chunk_size": args.attention_chunk_size,
        "env": _env(args.env),
        "layers": args.layers.split(",") if args.layers else None,
    }


def describe(case: dict, result: dict, extra_lines: list[str] = (), defects: list = (), packages: str = "") -> str:
    """Plain-words rendering of one outcome; each reviewed vLLM defect that produced it is marked beside the first
    rule of its mechanism that fired."""
    era, version = resolve_era(case["vllm_version"] or NEWEST_RELEASE)
    default = " (the newest release kvconform knows; --vllm-version picks another)" if case["vllm_version"] is None else ""
    lines = [
        f"vLLM {version}{default}: era {era.id} ({era.summary})",
        f"platform: {case['platform']}",
        *([packages] if packages else []),
        f"vLLM flags: {' '.join(case['cli_args']) or '(none)'}",
        "",
    ]
    typed = Outcome.from_dict(result)
    if typed.error:
        lines.append(f"result: {typed.error.type} at stage {typed.error.stage}")
        lines.append(f"  {typed.error.text}")
    elif typed.unknown:
        lines.append("result: unknown")
        lines.append(f"  {typed.unknown}")
    else:
        value = typed.resolved_disable_hma
        state = "HMA enabled" if value is False else "HMA disabled"
        lines.append(f"result: {state} (disable_hybrid_kv_cache_manager = {value}), through stage {case['stage']}")
    if "kv_cache_groups_not_evaluated" in typed.rules:
        lines.append(f"  KV cache groups: not evaluated (stage {case['stage']} ends before kv_cache_groups)")
    for group in typed.kv_cache_groups or ():
        lines.append(f"  KV cache group: {group['kind']} layers {group['layers']} (block size {group['block_size']}, {group['page_size_bytes']} bytes per block per layer)")
    if extra_lines:
        lines.extend(extra_lines)
    lines.append("")
    if typed.warnings:
        lines.append("warnings, in the order vLLM logs them:")
        lines.extend(f"  {n}. {text}" for n, text in enumerate(typed.warning_texts, 1))
    else:
        lines.append("warnings: none")
    lines.append("")
    lines.append("rules that fired:")
    pending = list(defects)
    for rule in typed.rules:
        lines.append(f"  - {rule}: {RULES.get(rule, rule)}")
        for defect in [d for d in pending if not d.rules or rule in d.rules]:
            lines.append(f"    {defect.marker()}")
            pending.remove(defect)
    lines.extend(f"  {defect.marker()}" for defect in pending)
    return "\n".join(lines)


def run(args) -> int:
    """Resolve the command line's case and print it."""
    check_misspelled(args.extra, args.own_options)
    normalise_choices(args)
    given = parse_installed(args.installed)
    assumed = assumed_versions(given)
    case = build_case(args)
    try:
        parsed = parse_case({**case, "vllm_version": case["vllm_version"] or NEWEST_RELEASE})
    except ValueError as exc:
        raise UsageError(f"kvconform explain: {exc}") from None
    if parsed.stage == "cli_parse":
        raise UsageError(f"kvconform explain: --stage: {args.stage!r} is not accepted; expected {_STAGE_WORDS}")
    refuse_unrecognized(parsed)
    with packages_assumed_installed(assumed):
        result = C.run_case(parsed)
        error = Outcome.from_dict(result).error
        if error and error.stage == "input":
            raise UsageError(f"kvconform explain: {error.text}")
        # the invariants' related cases are answered under the same assumption
        defects = defects_of({**case, "vllm_version": parsed.vllm_version, "platform": parsed.platform}, result)
    if args.json:
        era, version = resolve_era(parsed.vllm_version)
        payload = {
            **result,
            "vllm_version": version,
            "vllm_version_default": case["vllm_version"] is None,
            "era": era.id,
            "platform": parsed.platform,
            "stage": parsed.stage,
            "cli_args": case["cli_args"],
            "installed": assumed,
            "rule_descriptions": {rule: RULES.get(rule, rule) for rule in result["rules"]},
            "hints": hints(parsed),
            "defects": [defect.as_json() for defect in defects],
        }
        print(json.dumps(payload, indent=2))
    else:
        print(describe({**case, "platform": parsed.platform, "stage": parsed.stage}, result, hints(parsed), defects,
                       installed_line(given, assumed, result["rules"])))
    return exit_code_of(result) if args.exit_code else 0
