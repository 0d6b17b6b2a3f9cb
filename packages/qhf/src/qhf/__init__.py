"""Hugging Face transformers integration for lowbit: load, quantize, save, load quantized, export, evaluate."""

__version__ = "0.1.0"

from .api import QuantModel, load
from .architectures import discover, overridden_model_types
from .errors import (
    CalibrationError,
    MissingFileError,
    QHFError,
    SourceFormatError,
    StateError,
    TokenizerError,
    UnsupportedArchitectureError,
    VerificationError,
)
from .export import export_dense
from .load_quantized import QuantizedCausalLM, load_quantized
from .perplexity import evaluate
from .summary import QuantizeSummary

__all__ = [
    "CalibrationError",
    "MissingFileError",
    "QHFError",
    "QuantModel",
    "QuantizeSummary",
    "QuantizedCausalLM",
    "SourceFormatError",
    "StateError",
    "TokenizerError",
    "UnsupportedArchitectureError",
    "VerificationError",
    "__version__",
    "discover",
    "evaluate",
    "export_dense",
    "load",
    "load_quantized",
    "overridden_model_types",
]
