"""The torch reference backend: dequantize, then ``torch.nn.functional.linear``.

Serves every layout registered in qformats (its unpack gives an integer-code ``QuantizedWeight``: GPTQ and
AWQ families at any bits, group size, symmetry and g_idx; Marlin; GGUF type-0) and the weight-only families
read by :mod:`qkernels.weight_only` (FP8, bitsandbytes NF4/FP4/int8, every GGUF block type, QQQ,
ParoQuant, VPTQ, EXL3), whose logical objects offer ``dequantize()``. Every device and activation dtype. The dense
weight is rebuilt per call in float32 (bit-identical to ``QuantizedWeight.dequantize``), then cast to the
activation dtype; ``cache_dense=True`` keeps the cast weight for repeated calls (memory: ``out * in``
elements).
"""

from __future__ import annotations

import torch
from qformats.layouts.families import layout_kinds, registered_families
from qformats.layouts.registry import registered_layouts
from qformats.logical import QuantizedWeight

from ..capabilities import Capabilities
from ..checkpoint import LoadedCheckpoint
from ..contract import KernelContract
from ..device import Target
from ..module import QuantLinear
from ..registry import register_backend

#: The integer methods plus the config method of every qformats weight family (fp8, bitsandbytes, gguf, ...).
_FAMILIES = registered_families()
_METHODS = frozenset({"gptq", "awq"} | {f.method for f in _FAMILIES if f.method})


@register_backend
class TorchReferenceLinear(QuantLinear):
    """Dequantize-then-matmul for every registered layout; the numerical reference of the suite."""

    NAME = "torch"
    _codes: torch.Tensor  # uint8 [out, in]  (registered buffers; typed here for mypy)
    _scales: torch.Tensor  # float32 [groups, out]
    _zeros: torch.Tensor  # float32 [groups, out]
    _g_idx: torch.Tensor  # int64 [in]
    REQUIRES = "nothing beyond torch; the format's layout must be registered in qformats"
    CAPS = Capabilities(
        methods=_METHODS,
        formats=None,
        bits=frozenset(range(1, 9)),
        group_sizes=None,
        sym=frozenset({True, False}),
        act_order=True,
        devices=frozenset({"cpu", "cuda"}),
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        pack_dtypes=None,
        priority=10,
        logical_kinds=frozenset(f.logical_kind for f in _FAMILIES),
    )

    @classmethod
    def runtime_reasons(cls, contract: KernelContract, target: Target) -> list[str]:
        if contract.logical_kind in layout_kinds() and contract.format not in registered_layouts():
            return [f"format {contract.format!r} has no layout registered in qformats"]
        return []

    @classmethod
    def weight_reasons(cls, logical: object) -> list[str]:
        if isinstance(logical, QuantizedWeight) or callable(getattr(logical, "dequantize", None)):
            return []
        return [f"logical weight {type(logical).__name__} offers no dequantize()"]

    def __init__(self, loaded: LoadedCheckpoint, target: Target, *, cache_dense: bool = False) -> None:
        super().__init__(loaded, target)
        self.cache_dense = bool(cache_dense)
        self._cache: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
        w = loaded.logical
        if isinstance(w, QuantizedWeight):
            # Logical tensors in torch: codes [out, in] uint8, scales/zeros [G, out] float32, g_idx [in] int64.
            self.register_buffer("_codes", torch.from_numpy(w.codes.astype("uint8")), persistent=False)
            self.register_buffer("_scales", torch.from_numpy(w.scales.astype("float32")), persistent=False)
            self.register_buffer("_zeros", torch.from_numpy(w.zeros.astype("float32")), persistent=False)
            self.register_buffer("_g_idx", torch.from_numpy(w.g_idx.astype("int64")), persistent=False)
            self._dense32: torch.Tensor | None = None
        else:
            self.register_buffer("_dense32", torch.from_numpy(w.dequantize()).float(), persistent=False)  # type: ignore[attr-defined]

    def drop_runtime_caches(self) -> None:
        self._cache.clear()  # device/dtype moves invalidate the cached dense weight

    def dense_weight(self) -> torch.Tensor:
        """Float32 ``[out, in]`` on the module's device: ``scales[g_idx] * (codes - zeros[g_idx])``."""
        if self._dense32 is not None:
            return self._dense32
        s = self._scales[self._g_idx].T
        z = self._zeros[self._g_idx].T
        return (s * (self._codes.float() - z)).contiguous()  # [out, in] row-major (the bf16 GEMM needs it)

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        key = (x.dtype, x.device)
        w = self._cache.get(key)
        if w is None:
            w = self.dense_weight().to(x.dtype)
            if self.cache_dense:
                self._cache[key] = w
        return torch.nn.functional.linear(x, w)
