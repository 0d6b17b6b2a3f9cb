"""Quantized linear modules, backend registry and CPU/Triton kernels.

Build a module from a checkpoint module's tensors with :func:`quant_linear` (or from a logical weight with
:func:`quant_linear_from_weight`); ask which backend would serve a contract, and why the others would not,
with :func:`select` / :func:`probe`.
"""

from .build import quant_linear, quant_linear_from_weight, repack
from .capabilities import Capabilities
from .contract import KernelContract
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

__version__ = "0.1.0"

__all__ = [
    "AUTO",
    "BackendRefusedError",
    "Candidate",
    "Capabilities",
    "DuplicateBackendError",
    "KernelContract",
    "KernelInputError",
    "QKernelsError",
    "QuantLinear",
    "Selection",
    "Target",
    "UnknownBackendError",
    "UnsupportedContractError",
    "__version__",
    "get_backend",
    "probe",
    "quant_linear",
    "quant_linear_from_weight",
    "register_backend",
    "registered_backends",
    "repack",
    "resolve_target",
    "select",
]
