"""The logical FP8 weight: float8 codes plus a float32 ``weight_scale_inv`` at one granularity.

Shapes: ``codes`` uint8 ``[out, in]`` (bit patterns of ``format``); ``scale_inv`` float32 ``[]`` for
``tensor`` scaling, ``[out]`` for ``row``, ``[out / br, in / bc]`` for ``block`` with block ``(br, bc)``.

Two conventions share the tensor name ``weight_scale_inv``, and the values cannot tell them apart:

* ``"inverse"`` (the reference toolkit): ``scale_inv`` multiplied the weight when quantizing,
  ``q = fp8(clamp(W * scale_inv, +-max))``, so dequantization divides: ``W = q / scale_inv``.
* ``"multiplier"`` (DeepSeek-style checkpoints and tools that follow them): ``W = q * scale_inv``.

The semantics is therefore always explicit; see :func:`~qformats.layouts.fp8.layout.scale_semantics`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import LayoutError
from .formats import FP8Format, fp8_format

SCALE_METHODS = ("tensor", "row", "block")
SEMANTICS = ("inverse", "multiplier")


def scale_shape(method: str, shape: tuple[int, int], block: tuple[int, int] | None) -> tuple[int, ...]:
    """The ``weight_scale_inv`` shape for ``method`` on a ``[out, in]`` weight."""
    out, in_ = shape
    if method == "tensor":
        return ()
    if method == "row":
        return (out,)
    if method != "block":
        raise LayoutError(f"weight_scale_method: expected one of {SCALE_METHODS}, found {method!r}")
    if block is None or len(block) != 2 or min(block) <= 0:
        raise LayoutError(f"weight_block_size: expected [rows, cols] of positive ints for block scaling, found {block}")
    if out % block[0] or in_ % block[1]:
        raise LayoutError(f"weight: shape {shape} is not divisible by weight_block_size {list(block)}")
    return (out // block[0], in_ // block[1])


def _expand(scale_inv: np.ndarray, method: str, shape: tuple[int, int], block: tuple[int, int] | None) -> np.ndarray:
    if method == "tensor":
        return scale_inv.reshape(1, 1)
    if method == "row":
        return scale_inv.reshape(-1, 1)
    if block is None:
        raise LayoutError("weight_block_size: block scaling needs [rows, cols], found None")
    return np.repeat(np.repeat(scale_inv, block[0], axis=0), block[1], axis=1)


@dataclass(frozen=True, eq=False)
class FP8Weight:
    """FP8 codes ``[out, in]`` with their ``weight_scale_inv`` (see the module docstring)."""

    codes: np.ndarray
    scale_inv: np.ndarray
    format: str = "float8_e4m3fn"
    method: str = "row"
    block_size: tuple[int, int] | None = None
    semantics: str = "inverse"

    def __post_init__(self) -> None:
        fp8_format(self.format)
        if self.codes.dtype != np.uint8 or self.codes.ndim != 2:
            raise LayoutError(f"weight: expected 2-D uint8 FP8 codes, found {self.codes.dtype} {self.codes.shape}")
        expected = scale_shape(self.method, self.codes.shape, self.block_size)
        if self.scale_inv.shape != expected or self.scale_inv.dtype != np.float32:
            raise LayoutError(
                f"weight_scale_inv: expected float32 {expected} for {self.method} scaling, "
                f"found {self.scale_inv.dtype} {self.scale_inv.shape}"
            )
        if self.semantics not in SEMANTICS:
            raise LayoutError(f"weight_scale_semantics: expected one of {SEMANTICS}, found {self.semantics!r}")

    @property
    def fp8(self) -> FP8Format:
        return fp8_format(self.format)

    @classmethod
    def quantize(
        cls,
        weight: np.ndarray,
        *,
        format: str = "float8_e4m3fn",
        method: str = "row",
        block_size: tuple[int, int] | None = None,
    ) -> FP8Weight:
        """The reference quantizer in float32: ``scale_inv = max / absmax`` (1 where absmax is 0),
        ``codes = fp8(clamp(W * scale_inv, +-max))``; always ``"inverse"`` semantics."""
        fmt = fp8_format(format)
        w = np.asarray(weight, dtype=np.float32)
        if w.ndim != 2:
            raise LayoutError(f"weight: expected a 2-D [out, in] matrix, found shape {w.shape}")
        if not np.isfinite(w).all():
            raise LayoutError(f"weight: expected finite values, found {int((~np.isfinite(w)).sum())} inf/nan")
        block = tuple(block_size) if block_size is not None else None
        if block is not None and method == "row":
            raise LayoutError("weight_block_size is set but weight_scale_method is 'row' (expected 'block')")
        shape = scale_shape(method, w.shape, block)  # type: ignore[arg-type]
        top = np.float32(fmt.max)
        if method == "tensor":
            absmax = np.abs(w).max(initial=0).astype(np.float32).reshape(())
        elif method == "row":
            absmax = np.abs(w).max(axis=1, initial=0).astype(np.float32)
        else:
            br, bc = block  # type: ignore[misc]
            absmax = np.abs(w).reshape(shape[0], br, shape[1], bc).max(axis=(1, 3), initial=0).astype(np.float32)
        tiny = np.float32(np.finfo(np.float32).tiny)
        scale_inv = np.where(absmax > 0, top / np.maximum(absmax, tiny), np.float32(1)).astype(np.float32)
        scaled = w * _expand(scale_inv, method, w.shape, block)  # type: ignore[arg-type]
        codes = fmt.encode(np.clip(scaled, -top, top))
        return cls(codes, scale_inv.reshape(shape), fmt.name, method, block, "inverse")  # type: ignore[arg-type]

    def dequantize(self) -> np.ndarray:
        """float32 ``[out, in]``: codes divided by (inverse) or multiplied by (multiplier) the scale."""
        values = self.fp8.decode(self.codes)
        scale = _expand(self.scale_inv, self.method, self.codes.shape, self.block_size)
        result: np.ndarray = (values / scale if self.semantics == "inverse" else values * scale).astype(np.float32)
        return result
