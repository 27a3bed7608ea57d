"""vLLM's command line for the HMA-related flags, per era.

Before 0.33 the flag uses `argparse.BooleanOptionalAction` (`--disable-...`, `--no-disable-...`);
0.33's `EnableDisableAction` adds `--enable-...` and keeps `--no-disable-...` hidden. Like vLLM's
`FlexibleArgumentParser`, underscores in option names are accepted, and the last occurrence wins.
A rejected spelling is argparse's `SystemExit(2)`, reported as an `HMAConfigError` at stage cli_parse.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from reference_impl.config import kv_transfer_json, messages
from reference_impl.config.errors import HMAConfigError

FLAG = "hybrid-kv-cache-manager"


def json_object(text: str) -> dict[str, Any]:
    """argparse type for vLLM's JSON-valued config flags."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def kv_transfer_config_type(forbid_extra: bool):
    """argparse type of --kv-transfer-config: vLLM validates the text as a KVTransferConfig while parsing
    (pydantic `TypeAdapter(...).validate_json`, 0.13.0 and 0.33.0), so broken JSON, a value that is not an
    object and a field of the wrong type are argparse errors in pydantic's words; an empty value is no
    config at all."""

    def parse(text: str) -> dict[str, Any] | None:
        if text == "":
            return None
        invalid = kv_transfer_json.syntax_error(text)
        if invalid is not None:
            raise argparse.ArgumentTypeError(kv_transfer_json.render([(kv_transfer_json.TITLE, invalid)]))
        value = json.loads(text)
        errors = kv_transfer_json.field_errors(value, forbid_extra)
        if errors:
            raise argparse.ArgumentTypeError(kv_transfer_json.render(errors))
        if value.get("kv_connector") is not None and value.get("kv_role") is None:
            raise argparse.ArgumentTypeError(messages.E_KV_ROLE_MISSING)
        return value

    return parse


class _RaisingParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print usage and exit(2)
        raise HMAConfigError(message, stage="cli_parse", vllm_type="SystemExit", rule="cli_parsed")


class _EnableDisableAction(argparse.Action):
    """0.33's action: --disable-X -> True, --enable-X and the hidden --no-disable-X -> False."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, option_string.startswith("--disable-"))


_PARSERS: dict[tuple[bool, bool, bool], argparse.ArgumentParser] = {}


def build_parser(era) -> argparse.ArgumentParser:
    """An argparse parser with this era's spellings of the HMA-related options."""
    key = (era.cli_enable_form, era.offloading_shortcut != "absent", era.kv_transfer_forbids_extra)
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
                        type=kv_transfer_config_type(era.kv_transfer_forbids_extra))
    parser.add_argument("--kv-events-config", dest="kv_events_config", type=json_object)
    parser.add_argument("--speculative-config", dest="speculative_config", type=json_object)
    parser.add_argument("--hf-overrides", dest="hf_overrides", type=json_object)
    if key[1]:
        parser.add_argument("--kv-offloading-backend", dest="kv_offloading_backend", choices=("native", "lmcache"))
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
