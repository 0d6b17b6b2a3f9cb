"""lowbit: quantize LLMs to low-bit checkpoints; the full toolkit and the `lowbit` command."""

__version__ = "0.1.0"

__all__ = ["__version__"]
