"""What a quantization run leaves behind, in the form save/verify/export consume.

``QuantizedModules`` maps a module's full dotted name (``model.layers.3.mlp.down_proj``) to its logical
:class:`~qformats.logical.QuantizedWeight` and report row. It is filled from qlooper's run result or,
in tests, directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from qformats.logical import QuantizedWeight

REPORT_COLUMNS = ("layer", "module", "loss", "samples", "damp", "fallback", "seconds")


@dataclass
class ModuleResult:
    """One quantized linear: ``weight`` (logical, ``[out, in]`` codes), its ``report`` row, and optionally
    its layout tensors ``packed`` (as the loop packed them) and ``bias``."""

    name: str
    weight: QuantizedWeight
    report: dict[str, Any] = field(default_factory=dict)
    packed: dict[str, np.ndarray] | None = None
    bias: np.ndarray | None = None

    def row(self) -> dict[str, Any]:
        """The report row with every :data:`REPORT_COLUMNS` key (missing values as None)."""
        row = {key: self.report.get(key) for key in REPORT_COLUMNS}
        row["module"] = self.name
        return row


QuantizedModules = dict[str, ModuleResult]
