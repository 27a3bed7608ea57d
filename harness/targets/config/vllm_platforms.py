"""What each platform's `support_hybrid_kv_cache()` returns in the installed vLLM, read from vLLM itself.

Only the platform of the running machine can be imported for real (CUDA's module needs libcuda, XPU's
its kernels), so the answer comes from vLLM's own platform class where it imports, and otherwise from
the constant that the method returns in vLLM's platform source. Where vLLM's source does not decide the
answer (the TPU platform re-exported from the separate `tpu_inference` package in 0.33), the answer is
None and the reason says why: such cases are reported as unknown, not guessed.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

# Case platform -> (vLLM module, platform class name) that vLLM selects on such a machine.
PLATFORM_CLASSES: dict[str, tuple[str, str]] = {
    "cuda": ("vllm.platforms.cuda", "CudaPlatform"),
    "rocm": ("vllm.platforms.rocm", "RocmPlatform"),
    "xpu": ("vllm.platforms.xpu", "XPUPlatform"),
    "cpu": ("vllm.platforms.cpu", "CpuPlatform"),
    "tpu": ("vllm.platforms.tpu", "TpuPlatform"),
    "unspecified": ("vllm.platforms.interface", "UnspecifiedPlatform"),
}
_METHOD = "support_hybrid_kv_cache"
_BASE = ("vllm.platforms.interface", "Platform")


@dataclass(frozen=True)
class PlatformSupport:
    """A platform's HMA support in the installed vLLM: the value (None = undecidable) and its source."""

    platform: str
    supported: bool | None
    source: str


def _module_file(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin) if spec is not None and spec.origin else None


def _constant_returned(func: ast.FunctionDef) -> bool | None:
    """The bool a method returns when its body is a single `return True/False`, else None."""
    body = [node for node in func.body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and isinstance(body[0].value, ast.Constant):
        value = body[0].value.value
        return value if isinstance(value, bool) else None
    return None


def _from_source(module: str, class_name: str) -> PlatformSupport | None:
    """Read the method's constant from the class (or its in-module bases) in vLLM's source file."""
    path = _module_file(module)
    if path is None:
        return None
    tree = ast.parse(path.read_text())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    if class_name not in classes:
        # A module-level alias such as `CudaPlatform = A if nvml_available else B`: every candidate must agree.
        candidates = _alias_candidates(tree, class_name)
        found = [_from_source_class(module, path, classes, c) for c in candidates]
        values = {f.supported for f in found if f is not None}
        if candidates and None not in found and len(values) == 1:
            return found[0]
        return None
    return _from_source_class(module, path, classes, class_name)


def _alias_candidates(tree: ast.Module, alias: str) -> list[str]:
    """Class names a top-level `alias = Name` or `alias = A if cond else B` may stand for."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == alias for t in node.targets):
            value = node.value
            if isinstance(value, ast.Name):
                return [value.id]
            if isinstance(value, ast.IfExp) and isinstance(value.body, ast.Name) and isinstance(value.orelse, ast.Name):
                return [value.body.id, value.orelse.id]
    return []


def _from_source_class(module: str, path: Path, classes: dict[str, ast.ClassDef], class_name: str) -> PlatformSupport | None:
    """The method's constant in class `class_name` of the parsed module, following in-module bases."""
    name = class_name
    seen = set()
    while name in classes and name not in seen:
        seen.add(name)
        cls = classes[name]
        for item in cls.body:
            if isinstance(item, ast.FunctionDef) and item.name == _METHOD:
                value = _constant_returned(item)
                where = f"{path.parent.name}/{path.name}:{item.lineno}"
                return None if value is None else PlatformSupport("", value, where)
        # Follow the first base that is defined in the same module; otherwise the base Platform decides.
        bases = [b.id for b in cls.bases if isinstance(b, ast.Name)]
        local = [b for b in bases if b in classes]
        if local:
            name = local[0]
            continue
        if (module, name) != _BASE:
            inherited = _from_source(*_BASE)
            if inherited is not None:
                return PlatformSupport("", inherited.supported, f"{inherited.source} (inherited by {class_name})")
        return None
    return None


@functools.lru_cache(maxsize=None)
def platform_support(platform: str) -> PlatformSupport:
    """HMA support of `platform` as the installed vLLM defines it."""
    module, class_name = PLATFORM_CLASSES[platform]
    try:
        cls = getattr(importlib.import_module(module), class_name)
        value = cls.support_hybrid_kv_cache()
        return PlatformSupport(platform, bool(value), f"{module}.{class_name}.{_METHOD}()")
    except Exception:  # the platform's own module does not import on this machine: read its source
        pass
    found = _from_source(module, class_name)
    if found is None:
        return PlatformSupport(
            platform,
            None,
            f"{module} defines no {class_name} with a constant {_METHOD}() in this vLLM "
            f"(its platform class lives outside vLLM), so the outcome cannot be determined",
        )
    return PlatformSupport(platform, found.supported, found.source)


@dataclass(frozen=True)
class HiSparseBackend:
    """A platform's `get_hisparse_backend_cls()` in the installed vLLM (0.34+): its value, whether vLLM's
    source decides it, and where the answer comes from."""

    value: str | None
    known: bool
    source: str


_HISPARSE_METHOD = "get_hisparse_backend_cls"


def _defines(module: str, class_name: str, method: str) -> bool | None:
    """Whether the class (or a base in its module) defines `method` in vLLM's source; None when the class is
    not in the module (its platform class lives outside vLLM)."""
    path = _module_file(module)
    if path is None:
        return None
    tree = ast.parse(path.read_text())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    names = [class_name] if class_name in classes else _alias_candidates(tree, class_name)
    if not names or any(name not in classes for name in names):
        return None
    found = set()
    for name in names:
        seen, defined = set(), False
        while name in classes and name not in seen and not defined:
            seen.add(name)
            defined = any(isinstance(item, ast.FunctionDef) and item.name == method for item in classes[name].body)
            local = [b.id for b in classes[name].bases if isinstance(b, ast.Name) and b.id in classes]
            name = local[0] if local else ""
        found.add(defined)
    return found.pop() if len(found) == 1 else None


@functools.lru_cache(maxsize=None)
def hisparse_backend(platform: str) -> HiSparseBackend | None:
    """The HiSparse backend `platform` has in the installed vLLM; None when this vLLM asks no such method
    (before 0.34, HiSparse checks `is_cuda()`). A platform whose class lives outside vLLM is not known."""
    base_module, base_name = _BASE
    base = getattr(importlib.import_module(base_module), base_name)
    if not hasattr(base, _HISPARSE_METHOD):
        return None
    module, class_name = PLATFORM_CLASSES[platform]
    try:
        cls = getattr(importlib.import_module(module), class_name)
        return HiSparseBackend(cls.get_hisparse_backend_cls(), True, f"{module}.{class_name}.{_HISPARSE_METHOD}()")
    except Exception:  # the platform's own module does not import on this machine: read its source
        pass
    defined = _defines(module, class_name, _HISPARSE_METHOD)
    if defined is None:
        return HiSparseBackend(f"{platform} backend (outside vLLM)", False,
                               f"{module} defines no {class_name}, so its {_HISPARSE_METHOD}() lives outside vLLM")
    if not defined:
        return HiSparseBackend(base.get_hisparse_backend_cls(), True, f"{_HISPARSE_METHOD}() inherited from {base_name}")
    return HiSparseBackend(f"{module}.{class_name} backend", True, f"{module}.{class_name} defines {_HISPARSE_METHOD}()")
