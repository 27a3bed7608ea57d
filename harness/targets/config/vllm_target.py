"""The `vllm` config target: one matrix case evaluated by the installed vLLM's own configuration code.

For each case it builds a real `VllmConfig` out of vLLM's real `SchedulerConfig`, `KVTransferConfig`,
`KVEventsConfig`, `SpeculativeConfig`, `CacheConfig` and a `ModelConfig` read from a tiny `config.json`
in a temporary folder (nothing is downloaded), with the running platform's `support_hybrid_kv_cache`
patched to the case's platform as that platform's class in this vLLM defines it. Stage `cli_parse` uses
vLLM's own argument parser; stage `create_connector` calls the real `KVConnectorFactory.create_connector`
with an empty `KVCacheConfig`. The outcome follows the `kvconform resolve` schema (issue 2). A case is read by the
schema's one parser (`reference_impl.config.case.parse_case`, an error at stage "input" as the resolver gives); this
module maps the parsed `Case` to vLLM's arguments.

A case the installed vLLM cannot evaluate here (another era than the installed release, a platform whose
class lives outside vLLM and on which the outcome depends, a speculative method whose plugin package is not
installed, a MultiConnector whose own constructor needs hardware) gets `unknown` with the reason, never a
guess. Import errors vLLM itself raises while resolving HMA (0.33 imports the connector module at config
time) are its behaviour and are reported as errors.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import io
import json
import linecache
import os
import sys
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from harness.targets.vllm_install import import_vllm_modules, installed_vllm_version, vllm_era
from harness.targets.config.vllm_outcome import (EXTERNAL_TWINS, HmaBlock, argparse_message, captured_warnings, error_of,
                                          unwrap_exception)
from harness.targets.config.vllm_platforms import hisparse_backend, platform_support
from reference_impl.config.case import Case, CaseError, parse_case
from reference_impl.config.outcome import Outcome, OutcomeError

# Packages that belong to vLLM itself: an import error naming one of them is vLLM's own behaviour.
_OWN_PACKAGES = frozenset({"vllm"})
# A tiny Llama; the speculative drafts and the target share it. MTP needs a DeepSeek-V3-shaped target.
_TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4,
    "num_hidden_layers": 2, "vocab_size": 1000, "max_position_embeddings": 2048, "torch_dtype": "float32",
}
_TINY_DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 32, "num_attention_heads": 4,
    "num_key_value_heads": 4, "num_hidden_layers": 2, "num_nextn_predict_layers": 1, "vocab_size": 1000,
    "max_position_embeddings": 2048, "kv_lora_rank": 16, "q_lora_rank": 16, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 16, "v_head_dim": 16, "n_routed_experts": 4, "n_shared_experts": 1,
    "num_experts_per_tok": 2, "first_k_dense_replace": 1, "torch_dtype": "float32",
}
_MAX_MODEL_LEN = 2048
# The suite's fixture-connector module -> its twin written against vLLM's base classes.


_UNPATCHED = object()
# HiSparse's model check (0.30+): whether it passes depends on the model, which a case does not describe.
_INDEX_TOPK = "HiSparse is only supported for DSA models with index_topk"


class NotEvaluable(Exception):
    """The installed vLLM cannot evaluate the case on this machine; the message is the reason."""


def vllm_module_path(path: str) -> str:
    """The module vLLM should load for a case's module path: the suite's fixture connectors have a
    twin built on vLLM's own base classes (see `harness.targets.config.vllm_external_connectors`)."""
    return EXTERNAL_TWINS.get(path, path)


def transfer_config(spec: dict[str, Any]) -> dict[str, Any]:
    """A case's connector (`Case.kv_transfer`, children in its extra config's "connectors" list) as this vLLM reads
    a `kv_transfer_config`: the suite's fixture modules replaced by their twins, a module path only where one is
    given, each child written the same way."""
    config = {key: spec[key] for key in ("kv_connector", "kv_role") if key in spec}
    if spec.get("kv_connector_module_path") is not None:
        config["kv_connector_module_path"] = vllm_module_path(spec["kv_connector_module_path"])
    extra = spec.get("kv_connector_extra_config")
    if extra is not None:
        extra = dict(extra)
        if "connectors" in extra:
            extra["connectors"] = [transfer_config(child) for child in extra["connectors"]]
        config["kv_connector_extra_config"] = extra
    return config


def _content_key(raw_case: Any) -> str | None:
    """A case's content without its id, as a canonical string; None for input that is not a JSON object."""
    if not isinstance(raw_case, dict):
        return None
    return json.dumps({k: v for k, v in raw_case.items() if k != "id"}, sort_keys=True, default=str)


def outcome(case_id: Any, resolved_disable_hma: bool | None = None, warnings: list[str] = (),
            error: OutcomeError | None = None, rules: list[str] = (), unknown: str | None = None) -> dict:
    """The JSON form of the outcome met here, each of vLLM's warnings given its id where its text is met
    (`Outcome.met`)."""
    return Outcome.met(case_id, resolved_disable_hma, warnings, error, rules, unknown).to_dict()


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Set the case's environment variables and restore the previous values afterwards."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = old


@contextlib.contextmanager
def patched_platform(supported: bool, is_cuda: bool | None, hisparse_backend: Any = _UNPATCHED,
                     is_rocm: bool | None = None) -> Iterator[None]:
    """Make the running platform answer as the case's platform does: `support_hybrid_kv_cache`, for HiSparse
    `is_cuda` (0.30-0.33) and `get_hisparse_backend_cls` (0.34), and `is_cuda`/`is_rocm` where a release asks
    those instead of `support_hybrid_kv_cache` (0.10.0, 0.10.1)."""
    from vllm.platforms import current_platform

    try:
        import vllm.config.vllm as config_module
    except ModuleNotFoundError:  # 0.11.0 and earlier define VllmConfig in vllm/config/__init__.py
        import vllm.config as config_module

    cls = type(current_platform)
    names = ("support_hybrid_kv_cache", "is_cuda", "is_rocm", "get_hisparse_backend_cls", "is_async_output_supported")
    saved = {name: cls.__dict__.get(name) for name in names}
    cls.support_hybrid_kv_cache = classmethod(lambda _cls: supported)
    # 0.10.0's VllmConfig asks the platform whether async output processing is supported once a model is given;
    # this machine's platform (no device detected) leaves it unimplemented and raises. The answer only sets
    # `use_async_output_proc`, which the HMA decision never reads: say "no", as a platform without it does.
    try:
        current_platform.is_async_output_supported(None)
    except NotImplementedError:
        cls.is_async_output_supported = classmethod(lambda _cls, enforce_eager: False)
    except Exception:  # any other answer (or complaint) is the platform's own
        pass
    if is_cuda is not None:
        cls.is_cuda = lambda _self: is_cuda
    if is_rocm is not None:
        cls.is_rocm = lambda _self: is_rocm
    if hisparse_backend is not _UNPATCHED:
        cls.get_hisparse_backend_cls = classmethod(lambda _cls: hisparse_backend)
    # 0.30-0.32: HiSparse forces the V2 model runner, whose validation raises "Model Runner V2 requires Triton."
    # without Triton (config/vllm.py `_validate_v2_model_runner`): a fact of this CPU machine, not of a CUDA
    # one, where vLLM's install brings Triton.
    triton = getattr(config_module, "HAS_TRITON", None)
    if is_cuda and triton is not None:
        config_module.HAS_TRITON = True
    try:
        yield
    finally:
        if triton is not None:
            config_module.HAS_TRITON = triton
        for name, old in saved.items():
            if old is None:
                if name in cls.__dict__:
                    delattr(cls, name)
            else:
                setattr(cls, name, old)


def _platforms_declare_hma_support() -> bool:
    """Whether this release's Platform interface has support_hybrid_kv_cache() (0.10.2 on)."""
    from vllm.platforms.interface import Platform

    return hasattr(Platform, "support_hybrid_kv_cache")


@contextlib.contextmanager
def custom_speculative_method(case: Case) -> Iterator[None]:
    """Register the case's custom speculative method as a vLLM plugin would (0.34's
    `register_speculative_method`), and remove it afterwards so that no case sees another's method."""
    if case.custom_speculative is None:
        yield
        return
    try:
        from vllm.v1.worker.gpu.spec_decode import speculator_config as registry
    except ImportError:
        raise NotEvaluable("this vLLM has no custom speculative methods (register_speculative_method)") from None
    config_cls = type(f"KvconformCustomSpeculatorConfig_{case.speculative_method}", (registry.SpeculatorConfig,), {
        "uses_target_hidden_states": case.custom_speculative,
        # a plugin names its speculator; the config-time code never imports it
        "speculator_class": "kvconform.custom_speculator.Speculator",
    })
    try:
        registry.register_speculative_method(case.speculative_method, config_cls)
    except ValueError as exc:  # a built-in name: the case cannot describe a custom method by it
        raise CaseError(f"speculative_method.name: {exc}") from None
    try:
        yield
    finally:
        registry._CUSTOM_CONFIGS.pop(case.speculative_method, None)


def _missing_package(exc: BaseException, case: Case) -> str | None:
    """The name of a non-vLLM package whose absence caused `exc`, if that is what happened."""
    inner = unwrap_exception(exc)
    if not isinstance(inner, ImportError):
        return None
    name = getattr(inner, "name", None) or ""
    top = name.split(".")[0]
    module_path = (case.kv_transfer or {}).get("kv_connector_module_path")
    own = {module_path.split(".")[0]} if module_path else set()
    if not top or top in _OWN_PACKAGES or top in own:
        return None
    return top


class VllmConfigTarget:
    """Callable target: `target(case) -> outcome`, backed by the installed vLLM release."""

    name = "vllm"

    def __init__(self, version: str, era: str):
        self.version = version
        self.era = era
        self._block = HmaBlock.locate()
        self._tmp = tempfile.TemporaryDirectory(prefix="kvconform-vllm-")
        self._parser = None
        # Answers by case content (the id aside). The matrix cells of an era, its invariant judgement (which runs
        # every cell again, and their relatives) and each xdist worker's share ask for the same cases: vLLM's
        # outcome depends on the case's content only (`harness.invariants.config.Memo` relies on that too), so
        # one process builds each case's VllmConfig once.
        self._answers: dict[str, dict] = {}
        _preimport_connector_modules()

    def describe(self) -> str:
        """One line for headers and reports: which vLLM and which era."""
        return f"vllm {self.version} (era {self.era})"

    def __call__(self, raw_case: Any) -> dict:
        case_id = raw_case.get("id") if isinstance(raw_case, dict) else None
        key = _content_key(raw_case)
        known = self._answers.get(key) if key is not None else None
        if known is None:
            known = self._answer(raw_case, case_id)
            if key is not None:
                self._answers[key] = copy.deepcopy(known)
            return known
        return {**copy.deepcopy(known), "id": case_id}

    def _answer(self, raw_case: Any, case_id: Any) -> dict:
        """vLLM's outcome for one case, built afresh."""
        try:
            case = parse_case(raw_case)
            if case.layers is not None and case.stage not in ("config", "cli_parse"):
                raise NotEvaluable(f"stage {case.stage} with layers: the vllm target does not group KV cache specs "
                                   "(it builds no model layers); the reference resolver does")
            return self._evaluate(case)
        except CaseError as exc:
            return outcome(case_id, error=OutcomeError.met("ValueError", "input", str(exc)))
        except NotEvaluable as exc:
            return outcome(case_id, unknown=str(exc))

    # -- evaluation ---------------------------------------------------------------------------------

    def _evaluate(self, case: Case) -> dict:
        if case.release_selector is not None and case.era != self.era:
            raise NotEvaluable(f"the case is for era {case.era}; the installed vLLM {self.version} is era {self.era}")
        support = platform_support(case.platform)
        supports = [(support.supported, f"{support.supported} ({support.source})")]
        if support.supported is None:
            # vLLM's source does not decide this platform's support: run vLLM both ways; the outcome is
            # known only when it does not depend on the value.
            supports = [(value, f"{value} (tried both values: {support.source})") for value in (True, False)]
        backends: list[Any] = [_UNPATCHED]
        reasons = [support.source] if support.supported is None else []
        if self._uses_hisparse(case):
            backend = hisparse_backend(case.platform)
            if backend is not None:
                backends = [backend.value] if backend.known else [None, backend.value]
                if not backend.known:
                    reasons.append(backend.source)
        runs = [self._evaluate_on(case, value, source, chosen) for value, source in supports for chosen in backends]
        comparable = [{k: v for k, v in run.items() if k != "rules"} for run in runs]
        if all(other == comparable[0] for other in comparable[1:]):
            return runs[0]
        raise NotEvaluable(f"platform {case.platform} on vLLM {self.version}: {'; '.join(reasons)}, and vLLM's "
                           "outcome depends on it")

    def _evaluate_on(self, case: Case, supported: bool, source: str, backend: Any = _UNPATCHED) -> dict:
        rules = [f"vllm:{case.platform}.support_hybrid_kv_cache={source}"]
        is_cuda = (case.platform == "cuda") if self._uses_hisparse(case) else None
        is_rocm = None
        if not _platforms_declare_hma_support():
            # 0.10.0 and 0.10.1 have no support_hybrid_kv_cache(): their HMA block asks `is_cuda() or is_rocm()`
            # (0.10.0 config.py:4661), so the running platform answers as the case's platform does there.
            is_cuda, is_rocm = case.platform == "cuda", case.platform == "rocm"
            rules.append(f"vllm:{case.platform}.is_cuda/is_rocm (no support_hybrid_kv_cache in this release)")
        if backend is not _UNPATCHED:
            rules.append(f"vllm:{case.platform}.get_hisparse_backend_cls={backend!r}")
        with (environment(case.env), patched_platform(supported, is_cuda, backend, is_rocm),
              custom_speculative_method(case), captured_warnings(self._block) as warnings):
            return self._run_stages(case, rules, warnings)

    def _uses_hisparse(self, case: Case) -> bool:
        """Whether vLLM switches HiSparse on for this case (asked of vLLM's own `has_connector`)."""
        if case.hisparse:
            return True
        transfer = self._kv_transfer_config(case)
        if transfer is None or "HiSparseConnector" not in case.connector_names():
            return False
        try:
            return bool(_as_config("KVTransferConfig", transfer).has_connector("HiSparseConnector"))
        except Exception:  # the config itself is invalid: vLLM will say so while building it
            return False

    def _run_stages(self, case: Case, rules: list[str], warnings: list[str]) -> dict:
        flag = case.flag
        parsed: dict[str, Any] = {}
        if case.cli_args is not None:
            try:
                parsed = self._parse_cli(list(case.cli_args))
            except SystemExit as exc:
                message = getattr(exc, "kvconform_message", "") or str(exc.code)
                return outcome(case.id, warnings=list(warnings), rules=rules,
                               error=OutcomeError.met("SystemExit", "cli_parse", message))
            flag = parsed.pop("disable_hybrid_kv_cache_manager")
            overrides = parsed.pop("hf_overrides", None)
            if isinstance(overrides, dict) and "attention_chunk_size" in overrides:
                # vLLM applies --hf-overrides to the model's hf_config; this target's tiny model takes the chunk
                # size in its config.json, which is the same place
                case = replace(case, attention_chunk_size=overrides["attention_chunk_size"])
            if case.stage == "cli_parse":
                return outcome(case.id, resolved_disable_hma=flag, warnings=list(warnings), rules=rules)
        try:
            vllm_config = self._build_config(case, flag, parsed)
        except NotEvaluable:
            raise
        except Exception as exc:  # vLLM's config-time behaviour, reported as the outcome
            if _INDEX_TOPK in str(unwrap_exception(exc)):
                # the answer depends on the model, which a case does not describe (this target's tiny Llama
                # has no index_topk; a DSA model passes)
                raise NotEvaluable("HiSparse with a model config: vLLM requires the model's index_topk, which a "
                                   "case does not describe") from None
            # An import error here is vLLM's own config-time behaviour (0.33 imports the connector's module
            # while resolving HMA, spec 3.3): the oracle models it, so it is reported, not hidden.
            return outcome(case.id, warnings=list(warnings), rules=rules, error=error_of(exc, "config"))
        resolved = vllm_config.scheduler_config.disable_hybrid_kv_cache_manager
        if case.stage == "create_connector":
            error = self._create_connector(case, vllm_config, rules)
            if error is not None:
                return outcome(case.id, warnings=list(warnings), rules=rules, error=error)
        return outcome(case.id, resolved_disable_hma=resolved, warnings=list(warnings), rules=rules)

    def _raise_if_environment(self, exc: BaseException, case: Case) -> None:
        package = _missing_package(exc, case)
        if package is not None:
            raise NotEvaluable(
                f"vLLM {self.version} needs the {package!r} package for this case and it is not installed here "
                f"({type(unwrap_exception(exc)).__name__}: {unwrap_exception(exc)})"
            )

    # -- stage cli_parse ----------------------------------------------------------------------------

    def _parse_cli(self, args: list[str]) -> dict:
        """Parse with vLLM's own engine-argument parser; argparse rejections become SystemExit."""
        parser = self._engine_parser()
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                namespace = parser.parse_args(args)
        except SystemExit as exc:
            lines = [line for line in stderr.getvalue().splitlines() if "error:" in line]
            message = lines[-1].split("error:", 1)[1].strip() if lines else ""
            exc.kvconform_message = argparse_message(exc, message)
            raise
        result = {"disable_hybrid_kv_cache_manager": namespace.disable_hybrid_kv_cache_manager}
        for name in ("kv_transfer_config", "kv_events_config", "speculative_config", "hf_overrides"):
            value = getattr(namespace, name, None)
            if value is not None:
                result[name] = value
        for name in _OFFLOADING_FIELDS:
            if hasattr(namespace, name):  # what EngineArgs hands CacheConfig, vLLM's own default included
                result[name] = getattr(namespace, name)
        return result

    def _engine_parser(self):
        if self._parser is None:
            from vllm.engine.arg_utils import EngineArgs
            try:
                from vllm.utils.argparse_utils import FlexibleArgumentParser
            except ImportError:  # before 0.11.1 the parser lived in vllm.utils itself
                from vllm.utils import FlexibleArgumentParser

            from vllm.platforms import current_platform

            # Building the parser instantiates DeviceConfig() for its defaults, which cannot infer a device
            # on a machine without an accelerator: let it see a CPU, only while the parser is built.
            cls = type(current_platform)
            saved = cls.__dict__.get("device_type")
            cls.device_type = "cpu"
            try:
                self._parser = EngineArgs.add_cli_args(FlexibleArgumentParser(prog="vllm"))
            finally:
                if saved is None:
                    del cls.device_type
                else:
                    cls.device_type = saved
        return self._parser

    # -- stage config -------------------------------------------------------------------------------

    def _build_config(self, case: Case, flag: bool | None, parsed: dict):
        from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig

        model_config = self._model_config(case)
        scheduler: dict[str, Any] = {"max_model_len": _MAX_MODEL_LEN, "is_encoder_decoder": False}
        if flag is not None:
            # An absent flag is not passed, as a user who does not name it: a two-state release (0.12 and
            # earlier) types the field bool and refuses None, and a tri-state one defaults it to None anyway.
            scheduler["disable_hybrid_kv_cache_manager"] = flag
        kwargs: dict[str, Any] = {
            "scheduler_config": _construct(SchedulerConfig, **scheduler),
            "device_config": DeviceConfig("cpu"),
            "cache_config": _construct(CacheConfig, **_offloading(case, parsed)),
        }
        if model_config is not None:
            kwargs["model_config"] = model_config
        transfer = parsed.get("kv_transfer_config", self._kv_transfer_config(case))
        if transfer is not None:
            kwargs["kv_transfer_config"] = _as_config("KVTransferConfig", transfer)
        events = parsed.get("kv_events_config", self._kv_events_config(case))
        if events is not None:
            kwargs["kv_events_config"] = _as_config("KVEventsConfig", events)
        speculative = self._speculative_config(case, model_config, parsed.get("speculative_config"))
        if speculative is not None:
            kwargs["speculative_config"] = speculative
        if case.hisparse:
            kwargs["attention_config"] = self._hisparse_attention_config()
        return VllmConfig(**kwargs)

    @staticmethod
    def _kv_transfer_config(case: Case) -> dict | None:
        return None if case.kv_transfer is None else transfer_config(case.kv_transfer)

    @staticmethod
    def _kv_events_config(case: Case) -> dict | None:
        return {"enable_kv_cache_events": True, "publisher": "null"} if case.kv_events else None

    def _hisparse_attention_config(self):
        try:
            from vllm.config.attention import AttentionConfig, HiSparseConfig
        except ImportError:
            raise NotEvaluable(f"vLLM {self.version} has no HiSparse configuration") from None
        return AttentionConfig(hisparse_config=HiSparseConfig())

    def _model_dir(self, base: dict, chunk: int | None) -> str:
        """A folder holding a tiny config.json (written once per shape)."""
        config = dict(base)
        if chunk is not None:
            config["attention_chunk_size"] = chunk
        name = f"{config['model_type']}-chunk{chunk}"
        folder = Path(self._tmp.name) / name
        if not folder.exists():
            folder.mkdir(parents=True)
            (folder / "config.json").write_text(json.dumps(config))
        return str(folder)

    def _model_config(self, case: Case):
        if case.attention_chunk_size is None and case.speculative_method is None:
            return None
        from vllm.config import ModelConfig

        base = _TINY_DEEPSEEK_V3 if case.speculative_method == "mtp" else _TINY_LLAMA
        folder = self._model_dir(base, case.attention_chunk_size)
        try:
            return ModelConfig(model=folder, skip_tokenizer_init=True, dtype="float32", max_model_len=_MAX_MODEL_LEN)
        except Exception as exc:
            raise NotEvaluable(f"cannot build a tiny {base['model_type']} model config in vLLM {self.version}: "
                               f"{type(unwrap_exception(exc)).__name__}: {unwrap_exception(exc)}") from None

    def _speculative_config(self, case: Case, model_config, from_cli: Any):
        method = case.speculative_method
        if from_cli is None and method is None:
            return None
        from vllm.config import ParallelConfig, SpeculativeConfig

        if from_cli is not None:
            spec = dict(from_cli) if isinstance(from_cli, dict) else from_cli
            if not isinstance(spec, dict):
                return spec
        else:
            spec = {"method": method, "num_speculative_tokens": 1}
            if method in ("eagle", "eagle3", "draft_model", "dflash", "dspark"):
                spec["model"] = self._model_dir(_TINY_LLAMA, None)
            if method in ("ngram", "ngram_gpu"):
                spec.update(prompt_lookup_max=2, prompt_lookup_min=1)
        if model_config is None:
            raise NotEvaluable("a speculative config needs a target model config; the case gives no model")
        try:
            return SpeculativeConfig(target_model_config=model_config, target_parallel_config=ParallelConfig(), **spec)
        except Exception as exc:
            self._raise_if_environment(exc, case)
            raise

    # -- stage create_connector ---------------------------------------------------------------------

    def _create_connector(self, case: Case, vllm_config, rules: list[str]) -> OutcomeError | None:
        """Call the real factory; only the factory's own decision is the outcome (see `_constructor_failure`)."""
        if vllm_config.kv_transfer_config is None:
            # vLLM creates no connector without a kv_transfer_config (the scheduler checks first).
            rules.append("vllm:no-connector-to-create")
            return None
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole

        create = lambda: _within_deadline(lambda: _factory_create(  # noqa: E731
            KVConnectorFactory, vllm_config, KVConnectorRole.SCHEDULER))
        try:
            connector = create()
        except Exception as exc:
            if not _constructor_failure(exc):
                return error_of(exc, "create_connector")
            # The factory's HMA gate passed and handed over to the connector's own constructor, which needs
            # what this machine lacks (a GPU, a transfer engine, real KV cache groups, a server to connect to).
            failure = _one_line(exc)
            if not _is_multi_connector(vllm_config):
                rules.append(f"vllm:factory-accepted; the connector's own constructor then failed here ({failure})")
                return None
            # MultiConnector builds its children before its own checks (child kv_role, the HMA assertion):
            # run it again with only the children's constructors replaced, so its own code still decides.
            rules.append(f"vllm:child-constructors-replaced (they failed here: {failure})")
            try:
                with _inert_multi_children():
                    connector = create()
            except Exception as retry_exc:
                if _raised_by_multi_connector(retry_exc):
                    return error_of(retry_exc, "create_connector")
                raise NotEvaluable(f"the factory accepted {case.kv_connector}, but its constructor needs what this "
                                   f"machine lacks ({_one_line(retry_exc)})") from None
        rules.append(f"vllm:created:{type(connector).__name__}")
        with contextlib.suppress(Exception):
            connector.shutdown()
        return None


def _factory_create(factory, vllm_config, role):
    """The scheduler-side connector, through this release's own factory entry point: `create_connector_v1`
    (0.10.0, beside a V0 `create_connector_v0`), `create_connector(config, role)` (0.10.1-0.11.0), or
    with the KV cache config as a third argument (0.11.1 on)."""
    create = getattr(factory, "create_connector", None) or factory.create_connector_v1
    import inspect

    if "kv_cache_config" in inspect.signature(create).parameters:
        return create(vllm_config, role, _empty_kv_cache_config())
    return create(vllm_config, role)


def _construct(cls, **kwargs):
    """Build a vLLM config class with the keyword arguments this release's class accepts."""
    import inspect

    accepted = inspect.signature(cls).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in accepted.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in accepted}
    return cls(**kwargs)


def _as_config(class_name: str, value: Any):
    import vllm.config as vllm_config_module

    cls = getattr(vllm_config_module, class_name)
    return cls(**value) if isinstance(value, dict) else value


_OFFLOADING_FIELDS = ("kv_offloading_backend", "kv_offloading_size")


def _offloading(case: Case, parsed: dict) -> dict:
    """CacheConfig's offloading fields: the command line's (when the case gives one), else the case's; a value
    left out is CacheConfig's own default. A release whose CacheConfig has no such field (before 0.11.1) cannot
    be given one: the case is not evaluable there, rather than evaluated without it."""
    import inspect

    from vllm.config import CacheConfig

    values: dict[str, Any] = {}
    for name in _OFFLOADING_FIELDS:
        value = parsed[name] if name in parsed else getattr(case, name)
        if value is not None:
            values[name] = value
    accepted = inspect.signature(CacheConfig).parameters
    missing = [name for name in values if name not in accepted]
    if missing:
        raise NotEvaluable(f"vLLM's CacheConfig has no {', '.join(missing)} in this release (kv offloading came in "
                           "0.11.1): a user cannot give it")
    return values


def _empty_kv_cache_config():
    from vllm.v1.kv_cache_interface import KVCacheConfig

    return KVCacheConfig(num_blocks=0, kv_cache_tensors=[], kv_cache_groups=[])


def _constructor_failure(exc: BaseException) -> bool:
    """Whether `exc` came out of `connector_cls(...)` inside the factory, i.e. after its HMA check (a
    constructor that never returned, `ConstructorDeadline`, counts when it was waiting there)."""
    if isinstance(exc, ConstructorDeadline):
        return exc.in_constructor
    tb = exc.__traceback__
    while tb is not None:
        at_call = _is_factory_constructor_call(tb.tb_frame.f_code, tb.tb_lineno)
        if at_call is not None:
            return at_call
        tb = tb.tb_next
    return False


def _is_factory_constructor_call(code, lineno: int) -> bool | None:
    """For a frame of the factory's `create_connector`: whether it stands at its `connector_cls(...)` line;
    None for any other frame."""
    if code.co_name in ("create_connector", "create_connector_v1") and code.co_filename.endswith("factory.py"):
        return "connector_cls(" in linecache.getline(code.co_filename, lineno)
    return None


#: How long the factory (and the connector constructor it calls) may take before the case is given up as
#: waiting for something this machine lacks: LMCacheMPConnector's constructor waits, with no timeout, for
#: LMCache's MP server (lmcache 0.5.6 vllm_multi_process_adapter.py, get_lmcache_chunk_size). A constructor
#: that works here returns in well under a second.
CONSTRUCTOR_DEADLINE_S = 30.0


class ConstructorDeadline(Exception):
    """The factory did not return within `CONSTRUCTOR_DEADLINE_S`; `in_constructor`: it was waiting inside
    the connector's constructor (after the factory's own checks)."""

    def __init__(self, seconds: float, in_constructor: bool) -> None:
        super().__init__(f"the connector's constructor did not return within {seconds:g} s (it waits for "
                         f"something this machine lacks, such as a server to connect to)")
        self.in_constructor = in_constructor


#: Connector classes whose constructor was still waiting at the deadline in this process. They would wait
#: again (for the same absent server), so later cases find their constructor raising `ConstructorDeadline` at
#: once: the outcome is the same (a constructor failing here), without another wait.
_WAITED_PAST_DEADLINE: set[type] = set()


#: Every connector the factory built in this process, and every exception it raised (whose traceback holds a
#: connector built half-way), kept referenced until the process ends. vLLM never drops a connector while it runs,
#: and some connectors' resources cannot be dropped safely: vLLM 0.25.0's MooncakeStoreConnector opens a ZMQ
#: context in its scheduler-side constructor and closes it nowhere, and when the garbage collector finalizes that
#: context in the middle of a later case, pyzmq's `Context.destroy` waits forever (random cases on 0.25.0 hung
#: in ModelConfig's construction). At interpreter exit pyzmq skips that finalizer.
_KEPT_ALIVE: list[Any] = []


def _within_deadline(call):
    """`call()` on a daemon thread: its result or exception, or `ConstructorDeadline` when it has not returned
    within `CONSTRUCTOR_DEADLINE_S` (the thread is left waiting; the process can still exit)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller's thread as it is
            box["error"] = exc
        _KEPT_ALIVE.append(box.get("value", box.get("error")))

    thread = threading.Thread(target=run, daemon=True, name="kvconform-create-connector")
    with _known_waiters_raise():
        thread.start()
        thread.join(CONSTRUCTOR_DEADLINE_S)
    if thread.is_alive():
        frame, waiting, in_constructor = sys._current_frames().get(thread.ident), None, False
        while frame is not None and not in_constructor:  # innermost frame first
            waiting = waiting or _connector_being_built(frame)
            in_constructor = bool(_is_factory_constructor_call(frame.f_code, frame.f_lineno))
            frame = frame.f_back
        if in_constructor and waiting is not None:
            _WAITED_PAST_DEADLINE.add(waiting)
        raise ConstructorDeadline(CONSTRUCTOR_DEADLINE_S, in_constructor)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _connector_being_built(frame) -> type | None:
    """The connector class whose constructor `frame` runs, if it does (vLLM's `KVConnectorBase_V1` among its
    bases). A MultiConnector is never the one: it waits only while a child's constructor does."""
    if frame.f_code.co_name != "__init__":
        return None
    cls = type(frame.f_locals.get("self"))
    names = {base.__name__ for base in cls.__mro__}
    return cls if "KVConnectorBase_V1" in names and "MultiConnector" not in names else None


@contextlib.contextmanager
def _known_waiters_raise() -> Iterator[None]:
    """Within: the constructor of every class in `_WAITED_PAST_DEADLINE` raises `ConstructorDeadline` at once."""
    def refuse(self, *args, **kwargs):
        raise ConstructorDeadline(CONSTRUCTOR_DEADLINE_S, in_constructor=True)

    saved = {cls: cls.__dict__.get("__init__") for cls in _WAITED_PAST_DEADLINE}
    for cls in saved:
        cls.__init__ = refuse
    try:
        yield
    finally:
        for cls, init in saved.items():
            if init is None:
                del cls.__init__
            else:
                cls.__init__ = init


def _preimport_connector_modules() -> None:
    """Import every registered connector module once, on the real platform, before any case patches it.

    Some modules decide at import time from `current_platform` (HiSparse's pulls CUDA kernels when
    `is_cuda()` is true): importing them first under a case's patched platform would make the outcome
    depend on case order. Modules that cannot import here stay unimported; their cases report that.
    """
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    for loader in list(KVConnectorFactory._registry.values()):
        with contextlib.suppress(Exception):
            loader()


def _one_line(exc: BaseException) -> str:
    inner = unwrap_exception(exc)
    text = str(inner).splitlines()[0] if str(inner) else ""
    return f"{type(inner).__name__}: {text}"


class _InertChild:
    """Stands in for a MultiConnector child whose real constructor needs hardware this machine lacks."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        self.vllm_config = vllm_config

    def shutdown(self) -> None:
        """Nothing to release."""


@functools.cache
def _inert_hma_child() -> type:
    """`_InertChild` declaring vLLM's `SupportsHMA` (one class per process: vLLM's base is imported lazily)."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA

    class _InertHMAChild(_InertChild, SupportsHMA):
        def request_finished_all_groups(self, request, block_ids):
            """Never called: the stand-in only lets MultiConnector's constructor run its own checks."""
            return False, None

    return _InertHMAChild


def _inert_child_for(cls) -> type:
    """`_InertChild`, declaring vLLM's `SupportsHMA` where the real child class does (a MultiConnector child stays
    itself): 0.21 and 0.22's MultiConnector asserts `all(supports_hma(c) for c in self._connectors)` over the
    constructed children (multi_connector.py, 0.21.0: 171-175), so the stand-in answers as the child would
    (0.22.0's ExampleHiddenStatesConnector, whose constructor asserts a speculative method, is SupportsHMA)."""
    from vllm.distributed.kv_transfer.kv_connector.v1 import base

    if any(klass.__name__ == "MultiConnector" for klass in cls.__mro__):
        return cls  # a nested MultiConnector runs its own checks, over its own (inert) children
    if not hasattr(base, "SupportsHMA"):  # before 0.11.1 no connector declares HMA support
        return _InertChild
    return _inert_hma_child() if issubclass(cls, base.SupportsHMA) else _InertChild


def _inert_v1_child_for(cls) -> type:
    """`_inert_child_for(cls)`, also a `KVConnectorBase_V1` (0.10.0's factory asserts that of the class it
    looked up before constructing it); nothing abstract is called on a stand-in."""
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1

    inert = _inert_child_for(cls)
    if issubclass(inert, KVConnectorBase_V1):
        return inert
    stand_in = type(inert.__name__, (inert, KVConnectorBase_V1), {})
    stand_in.__abstractmethods__ = frozenset()
    return stand_in


@contextlib.contextmanager
def _inert_children_through_factory(multi_module) -> Iterator[None]:
    """Before 0.11.1 MultiConnector builds each child through the factory it imported (no
    `_get_connector_classes_and_configs`): hand its module a factory that looks each child up as the real one
    does (registry, then module path; 0.10.0 inline, 0.10.1-0.11.0 `get_connector_class`) and constructs a
    stand-in."""
    real = multi_module.KVConnectorFactory

    def looked_up(lookup):
        # a child's class lookup (its module's imports included) is MultiConnector's own step: a failure
        # there is the outcome (`_raised_by_multi_connector`), unlike a stand-in's construction
        try:
            return _inert_v1_child_for(lookup())
        except Exception as exc:
            exc.kvconform_child_lookup = True
            raise

    class _InertChildFactory(real):
        _registry = {name: (lambda load=load: looked_up(load)) for name, load in real._registry.items()}

        if hasattr(real, "get_connector_class"):
            @classmethod
            def get_connector_class(cls, kv_transfer_config):
                return looked_up(lambda: real.get_connector_class(kv_transfer_config))

    multi_module.KVConnectorFactory = _InertChildFactory
    try:
        yield
    finally:
        multi_module.KVConnectorFactory = real


@contextlib.contextmanager
def _inert_multi_children() -> Iterator[None]:
    """Keep MultiConnector's real child-config resolution but construct each child as `_InertChild`."""
    from vllm.distributed.kv_transfer.kv_connector.v1 import multi_connector
    from vllm.distributed.kv_transfer.kv_connector.v1.multi_connector import MultiConnector

    if "_get_connector_classes_and_configs" not in MultiConnector.__dict__:
        with _inert_children_through_factory(multi_connector):
            yield
        return
    real = MultiConnector.__dict__["_get_connector_classes_and_configs"]
    resolve = real.__get__(None, MultiConnector) if isinstance(real, (classmethod, staticmethod)) else None

    def inert(self_or_cls, vllm_config):
        try:
            pairs = (resolve or real.__get__(self_or_cls))(vllm_config)
        except Exception as exc:  # the children's configs and class lookups are MultiConnector's own step
            exc.kvconform_child_lookup = True
            raise
        return [(_inert_child_for(cls), config) for cls, config in pairs]

    wrapper = classmethod(inert) if isinstance(real, classmethod) else inert
    MultiConnector._get_connector_classes_and_configs = wrapper
    try:
        yield
    finally:
        MultiConnector._get_connector_classes_and_configs = real


def _raised_by_multi_connector(exc: BaseException) -> bool:
    """Whether the innermost non-pydantic frame that raised `exc` is vLLM's MultiConnector or the child
    `KVTransferConfig` it builds (its own checks), rather than something a child needs."""
    if getattr(exc, "kvconform_child_lookup", False):
        return True
    tb = exc.__traceback__
    last = ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if "/pydantic" not in name:
            last = name
        tb = tb.tb_next
    # with the children's constructors inert, the factory's class lookup of a child is MultiConnector's own step
    return last.endswith(("kv_connector/v1/multi_connector.py", "config/kv_transfer.py", "kv_connector/factory.py"))


def _is_multi_connector(vllm_config) -> bool:
    """Whether the configured connector class is a MultiConnector (by name anywhere in its MRO)."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    transfer = vllm_config.kv_transfer_config
    if hasattr(KVConnectorFactory, "get_connector_class"):
        cls = KVConnectorFactory.get_connector_class(transfer)
    elif transfer.kv_connector in KVConnectorFactory._registry:  # 0.10.0 looks the class up inline, registry first
        cls = KVConnectorFactory._registry[transfer.kv_connector]()
    else:
        cls = getattr(importlib.import_module(transfer.kv_connector_module_path), transfer.kv_connector)
    return any(base.__name__ == "MultiConnector" for base in cls.__mro__)


def load_target() -> VllmConfigTarget:
    """The loader behind `--hma-target vllm`: the installed vLLM, or one line and exit 4 (UsageError)."""
    version = installed_vllm_version()
    era = vllm_era(version)
    import_vllm_modules(version)
    return VllmConfigTarget(version, era)
