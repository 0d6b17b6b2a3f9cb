"""Quantized linear modules, backend registry and CPU/Triton kernels."""

__version__ = "0.1.0"

__all__ = ["__version__"]
