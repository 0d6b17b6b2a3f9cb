"""The QQQ processor: GPTQ's processor with qalgos' :class:`~qalgos.qqq.QQQ` accumulator (W4A8 recipe).

Statistics, groups, lockstep and resume are GPTQ's; each solve returns a ``qformats`` ``QQQWeight`` (4-bit
codes, float16 group scales, float32 channel scales) that the loop packs with ``pack_qqq`` into the
reference's ``B`` / ``s_channel`` / ``s_group`` tensors. A module the loop marks for fallback gets RTN on
QQQ's grids. Solves run in this process even under a sharded executor (the sharded job rebuilds a GPTQ
accumulator).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import torch
from qalgos.qqq import QQQ, check_qqq_spec, quantize_qqq_rtn
from qalgos.spec import QuantSpec
from qformats.layouts.qqq import pack_qqq

from ..definition import ResolvedModule
from .gptq import GPTQProcessor


class QQQProcessor(GPTQProcessor):
    """GPTQ processor whose tasks are QQQ solves (see the module docstring)."""

    supports_compute_dtype = False  # not measured with a compute dtype: float32 forwards only

    method = "qqq"
    spread_solves = False

    def __init__(self, spec: QuantSpec) -> None:
        check_qqq_spec(spec)
        super().__init__(spec)

    def _new_task(self, mod: ResolvedModule) -> QQQ:
        task = QQQ(int(mod.weight.shape[1]), self.spec)
        self._tasks[mod.input_key] = task
        return task

    def _fall_back(self, weight: torch.Tensor, reason: str, tokens: int, spec: QuantSpec | None = None) -> Any:
        """RTN on QQQ's grids (QQQ takes no per-module spec: ``spec`` is always the run's)."""
        result = quantize_qqq_rtn(weight, self.spec, reason)
        return type(result)(result.weight, result.dequantized, result.loss, None, tokens, reason)

    @staticmethod
    def pack(weight: Any) -> dict[str, np.ndarray]:
        """The reference's QQQ tensors (``B``, ``s_channel``, ``s_group``) of a ``QQQWeight``."""
        return pack_qqq(weight)

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "spec": asdict(self.spec)}
