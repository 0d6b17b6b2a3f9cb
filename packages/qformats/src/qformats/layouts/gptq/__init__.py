"""The gptq layout family: ``gptq`` (v1 zeros), ``gptq_v2`` (true zeros), ``gptq_p`` (planar).

Importing this package registers the three layouts (the registry imports it on first lookup).
"""

from __future__ import annotations

from ..registry import register_layout
from .layout import GPTQ_P, GPTQ_V1, GPTQ_V2, GptqLayout

for _layout in (GPTQ_V1, GPTQ_V2, GPTQ_P):
    register_layout(_layout)

__all__ = ["GPTQ_P", "GPTQ_V1", "GPTQ_V2", "GptqLayout"]
