"""vLLM's command line for the HMA-related flags, per era.

Before 0.33 the flag uses `argparse.BooleanOptionalAction` (`--disable-...`, `--no-disable-...`);
0.33's `EnableDisableAction` adds `--enable-...` and keeps `--no-disable-...` hidden. Like vLLM's
`FlexibleArgumentParser`, underscores in option names are accepted, and the last occurrence wins.
A rejected spelling is argparse's `SystemExit(2)`, reported as an `HMAConfigError` at stage cli_parse.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from reference_impl.config import json_configs, messages
from reference_impl.config.errors import HMAConfigError
from reference_impl.vocabulary import OFFLOADING_BACKENDS

FLAG = "hybrid-kv-cache-manager"


def optional_json(text: str) -> Any:
    """argparse type of --speculative-config (vLLM's `optional_type(json.loads)`): "" and "None" are no
    value; any JSON is accepted here (what is not an object fails VllmConfig's field check later)."""
    if text in ("", "None"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise argparse.ArgumentTypeError(messages.E_NOT_CONVERTED.format(value=text, function=json.loads)) from None


def dict_or_str(text: str) -> Any:
    """argparse type of --hf-overrides (vLLM's `union_dict_and_str`): text that does not look like a JSON
    object is kept as a string, the rest is `optional_json`."""
    if not re.match(r"(?s)^\s*{.*}\s*$", text):
        return str(text)
    return optional_json(text)


_SCHEMAS = {
    "kv_transfer_config": {"0.13": json_configs.KV_TRANSFER_0_13, "0.33": json_configs.KV_TRANSFER_0_33},
    "kv_events_config": {"0.13": json_configs.KV_EVENTS_0_13, "0.33": json_configs.KV_EVENTS_0_33},
}


def validated_config_type(dest: str, era):
    """argparse type of a JSON flag vLLM validates as a config class while parsing (pydantic
    `TypeAdapter(...).validate_json`, 0.11.0 to 0.34.0), in `era`'s schema (`Era.cli_json_release`,
    `cli_human_numbers`): broken JSON, a value that is not an object and a field of the wrong type are argparse
    errors in pydantic's words; an empty value is no config at all. A connector without a role is refused in the
    era's words (`Era.missing_kv_role_error`: before 0.11.1 the text named kv_disagg_role)."""
    schema = _SCHEMAS[dest][era.cli_json_release]
    human_numbers, missing_kv_role_error = era.cli_human_numbers, era.missing_kv_role_error

    def parse(text: str) -> dict[str, Any] | None:
        if text == "":
            return None
        if human_numbers:
            try:
                text = json_configs.expand_human_numbers(text)
            except json_configs.HumanNumberError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
        invalid = json_configs.syntax_error(text)
        if invalid is not None:
            raise argparse.ArgumentTypeError(json_configs.render([(schema.title, invalid)], schema.title))
        value = json.loads(text)
        errors = json_configs.field_errors(value, schema)
        if errors:
            raise argparse.ArgumentTypeError(json_configs.render(errors, schema.title))
        refused = schema.post_init(value, missing_kv_role_error) if schema.post_init is not None else None
        if refused is not None:
            raise argparse.ArgumentTypeError(refused)
        return value

    return parse


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit(2)
        raise HMAConfigError(message, stage="cli_parse", vllm_type="SystemExit", rule="cli_parsed")


class _EnableDisableAction(argparse.Action):
    """0.33's action: --disable-X -> True, --enable-X and the hidden --no-disable-X -> False."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string.startswith("--disable-"))


_PARSERS: dict[tuple[bool, bool, str, bool, str], argparse.ArgumentParser] = {}


def build_parser(era) -> argparse.ArgumentParser:
    """An argparse parser with this era's spellings of the HMA-related options."""
    key = (era.cli_enable_form, era.offloading_shortcut != "absent", era.cli_json_release, era.cli_human_numbers,
           era.missing_kv_role_error)
    parser = _PARSERS.get(key)
    if parser is not None:
        return parser
    parser = _RaisingParser(prog="vllm serve", add_help=False, allow_abbrev=False)
    if era.cli_enable_form:
        parser.add_argument(
            f"--disable-{FLAG}", f"--enable-{FLAG}", f"--no-disable-{FLAG}",
            dest="flag", nargs=0, action=_EnableDisableAction, default=None,
        )
    else:
        parser.add_argument(f"--disable-{FLAG}", dest="flag", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--kv-transfer-config", dest="kv_transfer_config",
                        type=validated_config_type("kv_transfer_config", era))
    parser.add_argument("--kv-events-config", dest="kv_events_config",
                        type=validated_config_type("kv_events_config", era))
    # 0.33's command line also spells --speculative-config as -sc (argparse names both in its errors)
    speculative = ("--speculative-config", "-sc") if era.cli_enable_form else ("--speculative-config",)
    parser.add_argument(*speculative, dest="speculative_config", type=optional_json)
    parser.add_argument("--hf-overrides", dest="hf_overrides", type=dict_or_str)
    if key[1]:
        parser.add_argument("--kv-offloading-backend", dest="kv_offloading_backend", choices=OFFLOADING_BACKENDS)
        parser.add_argument("--kv-offloading-size", dest="kv_offloading_size", type=float)
    _PARSERS[key] = parser
    return parser


def normalise(argv: list[str]) -> list[str]:
    """FlexibleArgumentParser's underscore normalisation of option names (values are left alone)."""
    out = []
    for token in argv:
        if token.startswith("--"):
            name, sep, value = token.partition("=")
            token = name.replace("_", "-") + sep + value
        out.append(token)
    return out


def parse_cli(argv: list[str], era) -> dict[str, Any]:
    """Parse vLLM-style flags; returns only the options that were given (None values dropped)."""
    parser = build_parser(era)
    namespace, unknown = parser.parse_known_args(normalise(list(argv)))
    if unknown:
        raise HMAConfigError(
            messages.E_UNRECOGNIZED_ARGUMENTS.format(arguments=" ".join(unknown)),
            stage="cli_parse", vllm_type="SystemExit", rule="cli_parsed",
        )
    given = {k: v for k, v in vars(namespace).items() if v is not None}
    given["flag"] = namespace.flag
    return given
