"""The Marlin layout family: ``marlin`` (GPTQ Marlin, symmetric) and ``awq_marlin`` (importing registers them)."""

from ..registry import register_layout
from .awq_marlin import AwqMarlinLayout
from .gptq_marlin import GptqMarlinLayout

for _layout in (GptqMarlinLayout(), AwqMarlinLayout()):
    register_layout(_layout)

__all__ = ["AwqMarlinLayout", "GptqMarlinLayout"]
