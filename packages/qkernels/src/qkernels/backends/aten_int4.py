"""The fast CPU int4 backend on ``torch.ops.aten._weight_int4pack_mm_for_cpu``.

The op computes ``sum_k x[k] * (s[g, n] * (q[n, k] - 8) + offset[g, n])``. Setting
``offset = (8 - z) * s`` makes that ``s * (q - z)``: exact for asymmetric zero points, not only for the
symmetric ``z = 8`` (a zero offset is wrong for asymmetric models). Act-order (a non-trivial ``g_idx``) is
served by sorting the input columns so each group is contiguous and permuting activations the same way;
this needs every group to hold exactly ``group_size`` columns.
"""

from __future__ import annotations

import numpy as np
import torch

from ..capabilities import Capabilities
from ..checkpoint import LoadedCheckpoint
from ..contract import KernelContract
from ..device import Target
from ..module import QuantLinear, integer_weight
from ..registry import register_backend

_OP = "_weight_int4pack_mm_for_cpu"
_CONVERT = "_convert_weight_to_int4pack_for_cpu"


@register_backend
class AtenInt4Linear(QuantLinear):
    """4-bit GPTQ/AWQ on the CPU through ATen's int4 matmul (scales and offsets in the activation dtype)."""

    NAME = "aten_int4"
    _packed: torch.Tensor  # ATen's int4 pack of the codes (a registered buffer)
    _scale_offset: torch.Tensor  # float32 [groups, out, 2]: scale and (8 - zero) * scale
    REQUIRES = "a torch build exposing aten._weight_int4pack_mm_for_cpu (torch >= 2.5)"
    CAPS = Capabilities(
        methods=frozenset({"gptq", "awq"}),
        formats=frozenset({"gptq", "gptq_v2", "gptq_p", "gemm", "marlin", "awq_marlin"}),
        bits=frozenset({4}),
        group_sizes=frozenset({32, 64, 128, 256}),
        sym=frozenset({True, False}),
        act_order=True,
        devices=frozenset({"cpu"}),
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        pack_dtypes=None,
        priority=110,
        in_multiple=2,
        out_multiple=16,
        group_divides_in=True,
    )

    @classmethod
    def runtime_reasons(cls, contract: KernelContract, target: Target) -> list[str]:
        missing = [op for op in (_OP, _CONVERT) if not hasattr(torch.ops.aten, op)]
        return [f"this torch build lacks aten.{op}" for op in missing]

    @classmethod
    def weight_reasons(cls, logical: object) -> list[str]:
        w = integer_weight(logical, cls.NAME)
        if w.has_default_g_idx():
            return []
        counts = np.bincount(w.g_idx, minlength=w.num_groups)
        if not np.all(counts == w.group_size):
            return [f"act-order g_idx groups are not all of size {w.group_size} (found sizes {sorted(set(counts))})"]
        return []

    def __init__(self, loaded: LoadedCheckpoint, target: Target) -> None:
        super().__init__(loaded, target)
        w = integer_weight(loaded.logical, self.NAME)
        codes = torch.from_numpy(w.codes.astype(np.int32))  # [out, in]
        if w.has_default_g_idx():
            self._perm: torch.Tensor | None = None
        else:
            perm = torch.from_numpy(np.argsort(w.g_idx, kind="stable").astype(np.int64))
            self.register_buffer("_perm", perm, persistent=False)
            codes = codes[:, perm]
        self.register_buffer("_packed", getattr(torch.ops.aten, _CONVERT)(codes.contiguous(), 1), persistent=False)
        s = torch.from_numpy(w.scales.astype(np.float32))
        z = torch.from_numpy(w.zeros.astype(np.float32))
        self.register_buffer("_scale_offset", torch.stack([s, (8.0 - z) * s], dim=-1).contiguous(), persistent=False)
        self._by_dtype: dict[torch.dtype, torch.Tensor] = {}
        self._group = w.group_size

    def drop_runtime_caches(self) -> None:
        self._by_dtype.clear()

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        sz = self._by_dtype.get(x.dtype)
        if sz is None:
            sz = self._by_dtype[x.dtype] = self._scale_offset.to(x.dtype)
        if self._perm is not None:
            x = x.index_select(1, self._perm)
        out: torch.Tensor = getattr(torch.ops.aten, _OP)(x.contiguous(), self._packed, self._group, sz)
        return out
