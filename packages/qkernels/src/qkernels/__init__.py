"""Quantized linear modules, backend registry and CPU/Triton kernels.

Build a module from a checkpoint module's tensors with :func:`quant_linear` (or from a logical weight with
:func:`quant_linear_from_weight`); ask which backend would serve a contract, and why the others would not,
with :func:`select` / :func:`probe`.
"""

from .build import build_module, quant_linear, quant_linear_from_weight, repack
from .capabilities import Capabilities
from .contract import KernelContract
from .cpu_extension import ExtensionBuildError
from .device import Target, resolve_target
from .errors import (
    BackendRefusedError,
    DuplicateBackendError,
    KernelInputError,
    QKernelsError,
    UnknownBackendError,
    UnsupportedContractError,
)
from .module import QuantLinear
from .registry import AUTO, get_backend, register_backend, registered_backends
from .selection import Candidate, Selection, probe, select
from .weight_only import load_weight_only, weight_only_families, weight_only_linear

__version__ = "0.1.0"

__all__ = [
    "AUTO",
    "BackendRefusedError",
    "Candidate",
    "Capabilities",
    "DuplicateBackendError",
    "ExtensionBuildError",
    "KernelContract",
    "KernelInputError",
    "QKernelsError",
    "QuantLinear",
    "Selection",
    "Target",
    "UnknownBackendError",
    "UnsupportedContractError",
    "__version__",
    "build_module",
    "get_backend",
    "load_weight_only",
    "probe",
    "quant_linear",
    "quant_linear_from_weight",
    "register_backend",
    "registered_backends",
    "repack",
    "resolve_target",
    "select",
    "weight_only_families",
    "weight_only_linear",
]
