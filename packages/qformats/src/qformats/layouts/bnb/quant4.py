"""The logical bitsandbytes 4-bit weight (NF4 or FP4) with its quant state.

Shapes and units (``n = out * in`` codes, ``B`` = ``blocksize``, ``nb = ceil(n / B)`` blocks):

* ``packed``  uint8 ``[ceil(n / 2), 1]``: two codes per byte, the first code in the high nibble
  (row-major order over the ``[out, in]`` weight; an odd count is padded with the code of 0).
* ``absmax``  float32 ``[nb]`` block absolute maxima, or, when ``nested``, uint8 ``[nb]`` codes of
  ``absmax - offset`` in the 8-bit dynamic map (``nested_absmax`` float32 ``[ceil(nb / 256)]``,
  ``nested_quant_map`` float32 ``[256]``, ``nested_blocksize`` 256, float ``offset`` = mean absmax).
* ``quant_map`` float32 ``[16]``: the NF4 or FP4 table.

Dequantization (bitsandbytes' own arithmetic, float32): ``W = quant_map[code] * absmax[block]``, with
``absmax = nested_quant_map[code] * nested_absmax[block] + offset`` when nested.

Quantization follows bitsandbytes' reference kernel bit for bit for the codes and float32 absmax.
The nested statistics use the exact nearest dynamic-map entry; bitsandbytes' CPU kernel picks the
neighbouring entry for roughly 0.1% of near-midpoint values, so nested absmax codes may differ
from a bitsandbytes-written file in those places (its files still read exactly).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import LayoutError
from .blockwise import block_absmax, dequantize_blockwise, nearest_codes, quantize_blockwise, scale_blocks
from .tables import DYNAMIC, FP4_ORDER, quant_map

BLOCK_SIZES = tuple(2**k for k in range(5, 13))  # 32 ... 4096
NESTED_BLOCKSIZE = 256


@dataclass(frozen=True)
class NestedStats:
    """Double-quantized statistics: ``absmax`` codes decode through these."""

    absmax: np.ndarray  # float32 [ceil(nb / 256)]
    quant_map: np.ndarray  # float32 [256]
    offset: float
    blocksize: int = NESTED_BLOCKSIZE
    dtype: str = "float32"


@dataclass(frozen=True, eq=False)
class BnB4Weight:
    """A bitsandbytes 4-bit weight (see the module docstring for shapes)."""

    packed: np.ndarray
    absmax: np.ndarray
    quant_map: np.ndarray
    quant_type: str
    blocksize: int
    shape: tuple[int, ...]
    dtype: str = "float16"
    nested: NestedStats | None = None

    def __post_init__(self) -> None:
        n = int(np.prod(self.shape))
        if self.quant_type not in ("nf4", "fp4"):
            raise LayoutError(f"quant_type: expected 'nf4' or 'fp4', found {self.quant_type!r}")
        if self.packed.dtype != np.uint8 or self.packed.size != (n + 1) // 2:
            raise LayoutError(
                f"weight: expected {(n + 1) // 2} uint8 bytes for shape {self.shape}, "
                f"found {self.packed.dtype} {self.packed.shape}"
            )
        blocks = -(-n // self.blocksize)
        want = np.uint8 if self.nested is not None else np.float32
        if self.absmax.shape != (blocks,) or self.absmax.dtype != want:
            raise LayoutError(
                f"absmax: expected {np.dtype(want)} ({blocks},) for blocksize {self.blocksize}, "
                f"found {self.absmax.dtype} {self.absmax.shape}"
            )
        if self.quant_map.shape != (16,) or self.quant_map.dtype != np.float32:
            raise LayoutError(f"quant_map: expected float32 (16,), found {self.quant_map.dtype} {self.quant_map.shape}")
        if self.nested is not None:
            nested_blocks = -(-blocks // self.nested.blocksize)
            if self.nested.absmax.shape != (nested_blocks,) or self.nested.quant_map.shape != (256,):
                raise LayoutError(
                    f"nested_absmax/nested_quant_map: expected ({nested_blocks},) and (256,), "
                    f"found {self.nested.absmax.shape} and {self.nested.quant_map.shape}"
                )

    @classmethod
    def quantize(
        cls,
        weight: np.ndarray,
        *,
        quant_type: str = "fp4",
        blocksize: int = 64,
        compress_statistics: bool = True,
        dtype: str | None = None,
    ) -> BnB4Weight:
        """Quantize float ``weight`` (any shape, usually ``[out, in]``) to NF4/FP4 blocks."""
        if blocksize not in BLOCK_SIZES:
            raise LayoutError(f"block_size: expected a power of two in 32..4096, found {blocksize}")
        table = quant_map(quant_type)
        w = np.asarray(weight)
        if not np.isfinite(w).all():
            raise LayoutError(f"weight: expected finite values, found {int((~np.isfinite(w)).sum())} inf/nan")
        flat = w.astype(np.float32).reshape(-1)
        absmax = block_absmax(flat, blocksize)
        scaled = scale_blocks(flat, absmax, blocksize)
        if scaled.size % 2:
            scaled = np.append(scaled, np.float32(0))
        codes = nearest_codes(scaled, table, None if quant_type == "nf4" else FP4_ORDER)
        packed = ((codes[0::2] << np.uint8(4)) | codes[1::2]).reshape(-1, 1)
        name = dtype or (w.dtype.name if w.dtype.kind == "f" else "float32")
        if not compress_statistics:
            return cls(packed, absmax, table, quant_type, blocksize, tuple(w.shape), name)
        offset = np.float32(absmax.mean(dtype=np.float32))
        q_absmax, nested_absmax = quantize_blockwise(absmax - offset, DYNAMIC, NESTED_BLOCKSIZE)
        stats = NestedStats(nested_absmax, DYNAMIC.copy(), float(offset))
        return cls(packed, q_absmax, table, quant_type, blocksize, tuple(w.shape), name, stats)

    def block_absmax(self) -> np.ndarray:
        """float32 ``[nb]`` absmax per block (decoded from the nested statistics when present)."""
        if self.nested is None:
            return self.absmax
        decoded = dequantize_blockwise(self.absmax, self.nested.absmax, self.nested.quant_map, self.nested.blocksize)
        return (decoded + np.float32(self.nested.offset)).astype(np.float32)

    def codes(self) -> np.ndarray:
        """uint8 codes ``[n]`` in row-major order."""
        n = int(np.prod(self.shape))
        flat = self.packed.reshape(-1)
        return np.stack([flat >> np.uint8(4), flat & np.uint8(0x0F)], axis=1).reshape(-1)[:n]

    def dequantize(self) -> np.ndarray:
        """float32 weight of ``shape`` (bitsandbytes computes this in float32, then casts to ``dtype``)."""
        values = dequantize_blockwise(self.codes(), self.block_absmax(), self.quant_map, self.blocksize)
        return values.reshape(self.shape)
