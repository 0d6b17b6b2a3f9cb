"""Quantized checkpoint layouts and the quantization-config contract (numpy only)."""

__version__ = "0.1.0"

__all__ = ["__version__"]
