"""Quantization algorithms: RTN, GPTQ, AWQ and weight-only quantizers."""

__version__ = "0.1.0"

__all__ = ["__version__"]
