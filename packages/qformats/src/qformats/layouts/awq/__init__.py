"""The AWQ layout family: ``gemm``, ``gemv``, ``gemv_fast`` and ``llm-awq`` (importing registers them)."""

from ..registry import register_layout
from .gemm import AwqGemmLayout
from .gemv import AwqGemvLayout
from .gemv_fast import AwqGemvFastLayout, LlmAwqLayout

for _layout in (AwqGemmLayout(), AwqGemvLayout(), AwqGemvFastLayout(), LlmAwqLayout()):
    register_layout(_layout)

__all__ = ["AwqGemmLayout", "AwqGemvFastLayout", "AwqGemvLayout", "LlmAwqLayout"]
