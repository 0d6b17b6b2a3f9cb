"""What identifies a quantization run for resume: source weights, calibration, config, plan, versions.

A checkpoint written under one identity is only ever resumed under an equal identity; qcheckpoint
compares the top-level fields and names the ones that differ. A compute dtype other than float32
(``LoopOptions.compute_dtype``) is part of it (``loop.compute_dtype``: it changes the numbers); the compute
device and the executor are not (a run may resume on another device).
"""

from __future__ import annotations

import hashlib
import platform
from dataclasses import asdict, is_dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import torch
from torch import nn

from .calibration import CalibrationSet
from .definition import ModelDefinition
from .devices import resolve_compute_dtype
from .plan import LoopPlan
from .processors.base import Processor

IDENTITY_VERSION = 1
LIBRARIES = ("torch", "numpy", "safetensors", "qformats", "qalgos", "qkernels", "qcheckpoint", "qlooper")


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """The raw bytes of ``tensor`` (any dtype, bfloat16 included), CPU, contiguous."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes()


def source_fingerprint(model: nn.Module) -> str:
    """sha256 over every parameter and buffer: name, dtype, shape and bytes, in name order.

    Tensors on the ``meta`` device (lazily loaded layers) contribute name, dtype and shape only; callers
    with lazy models should pass ``LoopOptions.source_identity`` (e.g. hashes of the source files).
    """
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict(keep_vars=False).items()):
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(b"meta" if tensor.is_meta else tensor_bytes(tensor))
    return digest.hexdigest()


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for lib in LIBRARIES:
        try:
            found[lib] = version(lib)
        except PackageNotFoundError:
            found[lib] = "not installed"
    return found


def _jsonable(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):
        return {"type": type(value).__name__, **{k: _jsonable(v) for k, v in asdict(value).items()}}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return repr(value)  # exact, and never a non-finite JSON number
    return f"{type(value).__module__}.{type(value).__qualname__}"


def build_identity(
    model: nn.Module,
    definition: ModelDefinition,
    calibration: CalibrationSet | None,
    processor: Processor,
    fmt: str,
    options: Any,
    plan: LoopPlan,
) -> dict[str, Any]:
    """The identity dict (JSON values only). Call it before the model is mutated."""
    describe = getattr(processor, "describe", None)
    loop_config = {
        "true_sequential": options.true_sequential,
        "early_stop": options.early_stop,
        "pack_dtype": options.pack_dtype,
        "fallback": _jsonable(options.fallback),
    }
    compute_dtype = resolve_compute_dtype(getattr(options, "compute_dtype", None), argument="compute_dtype")
    if compute_dtype != torch.float32:  # it changes the numbers; float32 (the default) keeps older identities
        loop_config["compute_dtype"] = str(compute_dtype).removeprefix("torch.")
    return {
        "version": IDENTITY_VERSION,
        "source": options.source_identity or source_fingerprint(model),
        "calibration": calibration.fingerprint() if calibration is not None and processor.needs_calibration else None,
        "processor": _jsonable(describe() if describe is not None else {"class": type(processor).__qualname__}),
        "format": fmt,
        "loop": loop_config,
        "definition": _jsonable(definition.describe()),
        "plan": _jsonable(plan.describe()),
        "versions": _versions(),
    }
