"""How the `vllm` target turns vLLM's behaviour into outcome fields (harness/targets/config/vllm_outcome.py).

- Exceptions: config-time errors reach us inside pydantic's `ValidationError`; the outcome names the class
  and text that vLLM's own code raised. Checked with real pydantic where it is installed (the vLLM venv)
  and always with a stand-in shaped like it (same class name, a `ValueError`, `errors()` carrying
  `ctx.error`, the same text rendering), so the main venv covers the logic too.
- Warnings: only WARNING+ records of the `vllm` logger tree that the HMA resolution emits, in order.
- The suite's fixture connectors run as twins; messages are mapped back to the suite's module path.
"""

from __future__ import annotations

import ast
import importlib.util
import logging
from pathlib import Path

import pytest

from harness.targets.config.vllm_outcome import EXTERNAL_TWINS, HmaBlock, captured_warnings, error_of, unwrap_exception
from harness.targets.config.vllm_target import transfer_config, vllm_module_path
from reference_impl.config.case import parse_case

SUITE_MODULE = "suites.config.external_connectors"
TWIN_MODULE = "harness.targets.config.vllm_external_connectors"


class ValidationError(ValueError):
    """Stand-in for pydantic_core's ValidationError: what `unwrap_exception` relies on, nothing more."""

    def __init__(self, inner: BaseException | None, rendered: str):
        super().__init__(rendered)
        self._inner = inner

    def errors(self):
        ctx = {"error": self._inner} if self._inner is not None else {}
        return [{"type": "value_error", "loc": (), "msg": "Value error", "ctx": ctx}]


def _stand_in(inner: BaseException) -> ValidationError:
    label = "Assertion failed" if isinstance(inner, AssertionError) else "Value error"
    return ValidationError(inner, f"1 validation error for VllmConfig\n  {label}, {inner} "
                                  "[type=value_error, input_value=ArgsKwargs(()), input_type=ArgsKwargs]")


def _pydantic(inner: BaseException) -> BaseException:
    """A real pydantic ValidationError raised by a validator that raises `inner`."""
    pydantic = pytest.importorskip("pydantic", reason="pydantic is not installed in this venv (the vLLM venv has it)")

    class Model(pydantic.BaseModel):
        value: int = 0

        @pydantic.model_validator(mode="after")
        def check(self):
            raise inner

    with pytest.raises(pydantic.ValidationError) as info:
        Model()
    return info.value


WRAPPERS = [pytest.param(_stand_in, id="stand-in"), pytest.param(_pydantic, id="pydantic")]


@pytest.mark.parametrize("wrap", WRAPPERS)
@pytest.mark.parametrize("inner", [
    ValueError("Connector LMCacheConnectorV1 does not support HMA but HMA is enabled."),
    AssertionError("MultiConnector requires a 'connectors' key"),
], ids=["ValueError", "AssertionError"])
def test_validation_error_is_unwrapped(wrap, inner):
    wrapped = wrap(inner)
    assert isinstance(wrapped, ValueError), "pydantic's ValidationError is a ValueError subclass"
    assert unwrap_exception(wrapped) is inner
    assert _plain(error_of(wrapped, "config")) == {"type": type(inner).__name__, "text": str(inner), "stage": "config"}


def test_pydantic_lets_other_exceptions_through():
    """pydantic wraps only ValueError/AssertionError: a NotImplementedError arrives as vLLM raised it."""
    inner = NotImplementedError("hybrid KV cache manager is not supported with chunked local attention")
    with pytest.raises(NotImplementedError) as info:
        _pydantic(inner)
    assert info.value is inner
    assert _plain(error_of(info.value, "config")) == {"type": "NotImplementedError", "text": str(inner), "stage": "config"}


@pytest.mark.parametrize("wrap", WRAPPERS)
def test_nested_wrappers_are_unwrapped(wrap):
    inner = ValueError("the innermost text")
    assert unwrap_exception(wrap(wrap(inner))) is inner


def test_wrapper_without_the_exception_keeps_the_raised_text():
    """Older pydantic renders without ctx.error: the text after "Value error, " is what vLLM raised."""
    wrapped = ValidationError(None, "1 validation error for VllmConfig\n  Value error, HMA off: no support "
                                    "[type=value_error, input_value={}, input_type=dict]")
    assert unwrap_exception(wrapped) is wrapped
    assert _plain(error_of(wrapped, "config")) == {"type": "ValidationError", "text": "HMA off: no support", "stage": "config"}
    wrapped = ValidationError(None, "1 validation error\n  Assertion failed, needs connectors\n    [type=assertion_error]")
    assert error_of(wrapped, "config").text == "needs connectors"


def test_plain_exceptions_pass_through():
    exc = ModuleNotFoundError("No module named 'lmcache'", name="lmcache")
    assert unwrap_exception(exc) is exc
    assert _plain(error_of(exc, "create_connector")) == {
        "type": "ModuleNotFoundError", "text": "No module named 'lmcache'", "stage": "create_connector"}


def test_something_else_named_validation_error_is_left_alone():
    """A class called ValidationError without pydantic's `errors()` is not unwrapped."""
    other = type("ValidationError", (ValueError,), {})("a different library's error")
    assert unwrap_exception(other) is other


# -- twins: messages name the suite's module again ----------------------------------------------------


@pytest.mark.parametrize("wrap", [None, _stand_in], ids=["plain", "wrapped"])
def test_twin_module_is_mapped_back_in_messages(wrap):
    raised = ValueError(f"Connector {TWIN_MODULE}.ExternalPlainConnector does not support HMA but HMA is enabled. "
                        f"(loaded from {TWIN_MODULE})")
    error = error_of(wrap(raised) if wrap else raised, "create_connector")
    assert error.text == (f"Connector {SUITE_MODULE}.ExternalPlainConnector does not support HMA but HMA is "
                                f"enabled. (loaded from {SUITE_MODULE})")
    assert TWIN_MODULE not in error.text


def test_module_paths_go_to_the_twin_and_only_the_suites():
    assert EXTERNAL_TWINS == {SUITE_MODULE: TWIN_MODULE}
    assert vllm_module_path(SUITE_MODULE) == TWIN_MODULE
    assert vllm_module_path("my_vendor.connectors") == "my_vendor.connectors"
    case = parse_case({"kv_connector": "MultiConnector", "multi_connector_children": [
        {"kv_connector": "MultiConnector", "kv_connector_module_path": SUITE_MODULE,
         "children": [{"kv_connector": "ExternalHMAConnector", "kv_connector_module_path": SUITE_MODULE}]}]})
    nested = transfer_config(case.kv_transfer)["kv_connector_extra_config"]["connectors"][0]
    assert nested["kv_connector_module_path"] == TWIN_MODULE
    assert nested["kv_connector_extra_config"]["connectors"][0]["kv_connector_module_path"] == TWIN_MODULE


def _public_classes(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef) and not node.name.startswith("_")}


def test_twins_keep_the_suites_class_names():
    """vLLM loads a class by the case's name from the twin module: every suite class needs its twin."""
    suite = Path(importlib.util.find_spec(SUITE_MODULE).origin)
    twin = Path(importlib.util.find_spec(TWIN_MODULE).origin)
    assert _public_classes(suite) == _public_classes(twin)
    assert f'TWIN_OF = "{SUITE_MODULE}"' in twin.read_text()


# -- in-scope warnings ----------------------------------------------------------------------------------

# A VllmConfig shaped like vLLM's: an HMA block inside __post_init__ (first and last lines mention the
# flag; the last statement runs on until a blank line), warnings before and after it, and helpers.
FAKE_CONFIG = '''\
import logging

logger = logging.getLogger("vllm.config.vllm")
other = logging.getLogger("not_vllm")


def unify_hybrid_kv_cache_specs():
    logger.warning("in scope: unification, wherever it lives")


def unrelated_helper():
    logger.warning("out of scope: another function")


class VllmConfig:
    def __post_init__(self):
        logger.warning("out of scope: before the block")
        if self.scheduler_config.disable_hybrid_kv_cache_manager is None:
            logger.warning("in scope: %s", "first")
        logger.info("below WARNING: never captured")
        other.warning("out of scope: not the vllm logger tree")
        logger.error("in scope: errors count too")
        self.scheduler_config.disable_hybrid_kv_cache_manager = (
            True)
        logger.warning("in scope: the last statement's tail")

        logger.warning("out of scope: after the blank line")
        unrelated_helper()
        unify_hybrid_kv_cache_specs()
'''
EXPECTED_IN_SCOPE = [
    "in scope: first",
    "in scope: errors count too",
    "in scope: the last statement's tail",
    "in scope: unification, wherever it lives",
]


class _Flags:
    disable_hybrid_kv_cache_manager = None


def test_block_location_and_warning_filter(fake_vllm):
    fake_vllm("0.33.0", {"vllm.config": FAKE_CONFIG})
    from vllm.config import VllmConfig

    block = HmaBlock.locate()
    source = Path(block.path).read_text().splitlines()
    assert source[block.first - 1].strip().startswith("if self.scheduler_config.disable_hybrid_kv_cache_manager")
    assert source[block.last - 1].strip() == 'logger.warning("in scope: the last statement\'s tail")'

    config = VllmConfig()
    config.scheduler_config = _Flags()
    vllm_logger = logging.getLogger("vllm")
    level, handlers = vllm_logger.level, list(vllm_logger.handlers)
    with captured_warnings(block) as messages:
        config.__post_init__()
    assert messages == EXPECTED_IN_SCOPE
    assert (vllm_logger.level, vllm_logger.handlers) == (level, handlers), "the capture must leave the logger as it was"


def test_capture_lowers_a_silenced_vllm_logger_only_while_it_runs(fake_vllm):
    """vLLM may configure its logger above WARNING; warnings must still be seen, and the level restored."""
    fake_vllm("0.33.0", {"vllm.config": FAKE_CONFIG})
    from vllm.config import VllmConfig

    vllm_logger = logging.getLogger("vllm")
    old = vllm_logger.level
    vllm_logger.setLevel(logging.ERROR)
    try:
        config = VllmConfig()
        config.scheduler_config = _Flags()
        with captured_warnings(HmaBlock.locate()) as messages:
            config.__post_init__()
        assert messages == EXPECTED_IN_SCOPE
        assert vllm_logger.level == logging.ERROR
    finally:
        vllm_logger.setLevel(old)


# -- pydantic's own field errors and argparse rejections, on one line (issue 11) -------------------------------

def _literal_error() -> BaseException:
    """A real pydantic ValidationError for a value outside a Literal, as KVTransferConfig(kv_role="both") raises."""
    pydantic = pytest.importorskip("pydantic", reason="pydantic is not installed in this venv (the vLLM venv has it)")
    from typing import Literal

    class KVTransferConfig(pydantic.BaseModel):
        kv_role: Literal["kv_producer", "kv_both", "kv_consumer"] | None = None

    with pytest.raises(pydantic.ValidationError) as info:
        KVTransferConfig(kv_role="both")
    return info.value


def test_pydantic_field_error_is_one_line_without_the_version_url():
    from reference_impl.config import messages

    error = error_of(_literal_error(), "config")
    assert _plain(error) == {"type": "ValidationError", "text": messages.E_KV_ROLE_INVALID, "stage": "config"}


def test_argparse_rejection_of_a_config_flag_names_the_option_and_the_field():
    from harness.targets.config.vllm_outcome import argparse_message

    try:
        try:
            raise _literal_error()
        except Exception as cause:
            raise SystemExit(2) from cause
    except SystemExit as exc:
        message = argparse_message(exc, "argument --kv-transfer-config: 1 validation error for KVTransferConfig")
    assert message.startswith("argument --kv-transfer-config: 1 validation error for KVTransferConfig: kv_role: ")
    assert argparse_message(SystemExit(2), "unrecognized arguments: --x") == "unrecognized arguments: --x"


def test_layers_beyond_stage_config_are_not_evaluable_by_the_vllm_target():
    from harness.targets.config.vllm_target import VllmConfigTarget

    # the case is parsed (and refused) before the target's vLLM is asked anything: no vLLM needed here
    target = VllmConfigTarget.__new__(VllmConfigTarget)
    target._answers = {}  # what __init__ sets up beside vLLM's own pieces: the answers kept by case content
    target._evaluate = lambda case: {"evaluated": case.stage}
    assert "does not group KV cache specs" in target({"id": 1, "layers": ["full", "mamba"]})["unknown"]
    assert target({"id": 1, "layers": ["full"], "stage": "config"}) == {"evaluated": "config"}
    assert target({"id": 1, "platform": "gpu"})["error"]["text"] == parse_error({"id": 1, "platform": "gpu"})


def _plain(error) -> dict:
    """An outcome's error without its id (which `tests/config/test_message_ids.py` judges)."""
    return {"type": error.type, "text": error.text, "stage": error.stage}


def parse_error(raw) -> str:
    try:
        parse_case(raw)
    except ValueError as exc:
        return str(exc)
    raise AssertionError(f"{raw!r} parsed")
