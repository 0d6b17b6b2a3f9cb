"""What a quantization run leaves behind, in the form save/verify/export consume.

``QuantizedModules`` maps a module's full dotted name (``model.layers.3.mlp.down_proj``) to qlooper's
:class:`~qlooper.finalize.FinalizedModule` (the logical weight, its layout tensors, bias) as the run
produced it (``QuantizationRun.modules``); the per-module report rows are qlooper's
:class:`~qlooper.report.ModuleReport` (``QuantizationRun.report``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from qlooper.finalize import FinalizedModule

QuantizedModules: TypeAlias = "Mapping[str, FinalizedModule]"
