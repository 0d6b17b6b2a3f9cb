"""The kernel contract: what a quantized linear layer asks of a backend.

A contract is derived from a layout key and its :class:`~qformats.layouts.registry.LayoutMeta`; it holds
nothing but plain values, so feasibility can be answered without tensors or building anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from qformats.enums import AWQ_ONLY_FORMATS, GPTQ_ONLY_FORMATS
from qformats.layouts.families import layout_kinds, weight_only_methods
from qformats.layouts.registry import LayoutMeta

from .errors import KernelInputError

_LAYOUT_METHODS = {"awq_marlin": "awq"}  # registered layout keys outside the FORMAT enum


def method_of(fmt: str, method: str | None = None) -> str:
    """The method family of layout ``fmt`` (``method`` wins when given; ``marlin`` etc. need it)."""
    if method is not None:
        return str(getattr(method, "value", method)).lower()
    key = str(getattr(fmt, "value", fmt))
    if key in {f.value for f in GPTQ_ONLY_FORMATS}:
        return "gptq"
    if key in {f.value for f in AWQ_ONLY_FORMATS}:
        return "awq"
    if key in weight_only_methods():  # qformats weight-only families: the method names the format family
        return key
    if key in _LAYOUT_METHODS:
        return _LAYOUT_METHODS[key]
    raise KernelInputError(f"format {key!r}: the quantization method is ambiguous or unknown; pass method= explicitly")


@dataclass(frozen=True)
class KernelContract:
    """A quantized linear layer as a backend sees it.

    ``in_features``/``out_features`` are the logical (unpadded) dimensions; ``act_order`` is True when
    the layer's ``g_idx`` is not the natural ``i // group_size`` map; ``pack_dtype`` names the numpy
    dtype of the layout's packed words; ``logical_kind`` is ``"integer"`` for a ``QuantizedWeight``
    (``scales * (codes - zeros)``) and names the codebook family otherwise (``"fp8"``, ``"bnb4"``,
    ``"bnb8"``, ``"gguf_blocks"``, ``"qqq"``, ``"paroquant"``, ``"vptq"``,
    ``"exl3"``).
    """

    method: str
    format: str
    bits: int
    group_size: int
    sym: bool
    in_features: int
    out_features: int
    act_order: bool = False
    pack_dtype: str = "int32"
    logical_kind: str = "integer"

    @classmethod
    def from_meta(
        cls, fmt: str, meta: LayoutMeta, *, method: str | None = None, act_order: bool = False
    ) -> KernelContract:
        """The contract of a module stored in layout ``fmt`` with metadata ``meta``."""
        return cls(
            method=method_of(fmt, method),
            format=str(getattr(fmt, "value", fmt)),
            bits=int(meta.bits),
            group_size=int(meta.group_size),
            sym=bool(meta.sym),
            in_features=int(meta.in_features),
            out_features=int(meta.out_features),
            act_order=bool(act_order),
            pack_dtype=str(meta.pack_dtype),
        )

    def describe(self) -> str:
        """A one-line human description used in error messages and explanations."""
        gs = "per-channel" if self.group_size == -1 else f"g{self.group_size}"
        sym = "sym" if self.sym else "asym"
        act = ", act-order" if self.act_order else ""
        if self.logical_kind not in layout_kinds():
            act += f", {self.logical_kind}"
        return (
            f"{self.method}/{self.format} {self.bits}-bit {gs} {sym}{act} "
            f"[{self.out_features}x{self.in_features}] pack {self.pack_dtype}"
        )
