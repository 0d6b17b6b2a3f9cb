"""Triton 4-bit dequant-matmul backends for GPTQ-family and AWQ-GEMM weights (CUDA, or emulated).

The modules repack the logical weight into the kernel's runtime form at load (GPTQ: v2 true zeros packed
along inputs; AWQ: GEMM order map along outputs) and keep the checkpoint tensors untouched. On an emulated
``cuda`` target they run on the CPU in Triton's interpreter, which must be switched on
(``TRITON_INTERPRET=1``) before the kernels are first imported.
"""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import torch

from ..capabilities import Capabilities
from ..checkpoint import LoadedCheckpoint
from ..contract import KernelContract
from ..device import Target
from ..int4_packing import pack_cols, pack_rows_gptq
from ..module import QuantLinear, integer_weight
from ..registry import register_backend

_KERNELS = "qkernels.triton_kernels.int4_matmul"
_DTYPES = frozenset({torch.float32, torch.bfloat16, torch.float16})


def triton_reasons(target: Target) -> list[str]:
    """Why the Triton kernels cannot run on ``target`` (empty when they can). Imports no kernel."""
    if importlib.util.find_spec("triton") is None:
        return ["triton is not installed (pip install 'qkernels[triton]')"]
    loaded = sys.modules.get(_KERNELS)
    if loaded is not None:
        interpreted = bool(loaded.INTERPRETED)
    else:
        import triton

        interpreted = bool(triton.knobs.runtime.interpret)
    if target.emulated and not interpreted:
        return ["emulation needs Triton's interpreter: set TRITON_INTERPRET=1 before the kernels are imported"]
    if not target.emulated and interpreted:
        return ["the Triton kernels were loaded in interpreter mode (TRITON_INTERPRET=1); they cannot run on a GPU"]
    return []


class _TritonInt4Base(QuantLinear):
    @classmethod
    def runtime_reasons(cls, contract: KernelContract, target: Target) -> list[str]:
        return triton_reasons(target)


@register_backend
class TritonGptqInt4Linear(_TritonInt4Base):
    """GPTQ-family 4-bit weights (any group size, act-order, asymmetric) on the Triton GPTQ kernel."""

    NAME = "triton_gptq"
    REQUIRES = "triton and a CUDA device (or an emulated cuda target with TRITON_INTERPRET=1)"
    CAPS = Capabilities(
        methods=frozenset({"gptq"}),
        formats=frozenset({"gptq", "gptq_v2", "gptq_p"}),
        bits=frozenset({4}),
        group_sizes=None,
        sym=frozenset({True, False}),
        act_order=True,
        devices=frozenset({"cuda"}),
        dtypes=_DTYPES,
        pack_dtypes=None,
        priority=60,
    )

    _qweight: torch.Tensor  # int32 [ceil(K/8), N] (registered buffers; typed here for mypy)
    _qzeros: torch.Tensor  # int32 [groups, ceil(N/8)]
    _scales: torch.Tensor  # float32 [groups, N]
    _g_idx: torch.Tensor  # int32 [K]

    def __init__(self, loaded: LoadedCheckpoint, target: Target) -> None:
        super().__init__(loaded, target)
        w = integer_weight(loaded.logical, self.NAME)
        codes_t = torch.from_numpy(w.codes.astype(np.int32)).T  # [K, N]
        self.register_buffer("_qweight", pack_rows_gptq(codes_t), persistent=False)
        self.register_buffer("_qzeros", pack_cols(torch.from_numpy(w.zeros.astype(np.int32)), awq_order=False), False)
        self.register_buffer("_scales", torch.from_numpy(w.scales.astype(np.float32)), persistent=False)
        self.register_buffer("_g_idx", torch.from_numpy(w.g_idx.astype(np.int32)), persistent=False)

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        from ..triton_kernels.int4_matmul import gptq_int4_matmul  # first use: TRITON_INTERPRET is read then

        return gptq_int4_matmul(
            x.contiguous(), self._qweight, self._scales, self._qzeros, self._g_idx, self.out_features
        )


@register_backend
class TritonAwqInt4Linear(_TritonInt4Base):
    """AWQ GEMM 4-bit weights (symmetric or not) on the Triton AWQ kernel."""

    NAME = "triton_awq"
    REQUIRES = TritonGptqInt4Linear.REQUIRES
    CAPS = Capabilities(
        methods=frozenset({"awq"}),
        formats=frozenset({"gemm"}),
        bits=frozenset({4}),
        group_sizes=None,
        sym=frozenset({True, False}),
        act_order=False,
        devices=frozenset({"cuda"}),
        dtypes=_DTYPES,
        pack_dtypes=None,
        priority=60,
    )

    _qweight: torch.Tensor  # int32 [K, ceil(N/8)] (registered buffers; typed here for mypy)
    _qzeros: torch.Tensor  # int32 [groups, ceil(N/8)]
    _scales: torch.Tensor  # float32 [groups, N]

    def __init__(self, loaded: LoadedCheckpoint, target: Target) -> None:
        super().__init__(loaded, target)
        w = integer_weight(loaded.logical, self.NAME)
        codes_t = torch.from_numpy(w.codes.astype(np.int32)).T.contiguous()  # [K, N]
        self.register_buffer("_qweight", pack_cols(codes_t, awq_order=True), persistent=False)
        self.register_buffer("_qzeros", pack_cols(torch.from_numpy(w.zeros.astype(np.int32)), awq_order=True), False)
        self.register_buffer("_scales", torch.from_numpy(w.scales.astype(np.float32)), persistent=False)
        self._group = w.in_features if w.group_size == -1 else w.group_size

    @classmethod
    def weight_reasons(cls, logical: object) -> list[str]:
        w = integer_weight(logical, cls.NAME)
        return [] if w.has_default_g_idx() else ["g_idx is not the natural i // group_size map"]

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        from ..triton_kernels.int4_matmul import awq_int4_matmul  # first use: TRITON_INTERPRET is read then

        return awq_int4_matmul(
            x.contiguous(), self._qweight, self._scales, self._qzeros, self._group, self.out_features
        )
