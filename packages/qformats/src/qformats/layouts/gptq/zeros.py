"""GPTQ zero-point conventions: v1 (``gptq``, stores ``zero - 1``) and v2 (``gptq_v2``/``gptq_p``, true zero).

The conversion works on packed ``qzeros`` words ``[G, words]`` exactly as the reference does, so the
words written match it bit for bit:

* 2/4/8-bit continuous: one whole-word add (v1 -> v2) or subtract (v2 -> v1) of a constant holding a
  1 in every field (``0x55555555``, ``0x11111111``, ``0x01010101`` for int32; analogous for
  int8/16/64). Arithmetic wraps modulo the word, so a field that overflows carries (or borrows) into
  its neighbour.
* 3-bit and planar: every logical field is decoded, moved by one modulo ``2**bits`` and repacked.

A field that overflows (``2**bits - 1`` going v1 -> v2, ``0`` going v2 -> v1) cannot be converted
losslessly; every conversion returns the number of such fields instead of hiding them. Symmetric
weights (zero ``2**(bits-1)``) never overflow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import LayoutError
from .bitstream import pack_stream, unpack_stream, word_dtype
from .planar import pack_planar, unpack_planar

_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@dataclass(frozen=True)
class ZeroConversion:
    """Converted ``qzeros`` words and the count of fields that over/underflowed (0 when lossless)."""

    qzeros: np.ndarray
    overflow_fields: int
    direction: str

    @property
    def lossless(self) -> bool:
        return self.overflow_fields == 0


def zero_word_constant(bits: int, pack_dtype: str = "int32") -> int:
    """The unsigned word with a 1 in every ``bits``-wide field (``0x11111111`` for 4-bit int32)."""
    word_bits = word_dtype(pack_dtype).itemsize * 8
    if bits not in (2, 4, 8):
        raise LayoutError(f"bits: whole-word zero constants exist for 2, 4 and 8 bits, found {bits}")
    return sum(1 << (bits * j) for j in range(word_bits // bits))


def _field_codes(qzeros: np.ndarray, bits: int, planar: bool) -> tuple[np.ndarray, int]:
    """Decode every field of ``qzeros`` (including tail padding) as uint8 ``[G, fields]``."""
    word_bits = qzeros.dtype.itemsize * 8
    if planar and bits not in (2, 4, 8):
        fields = qzeros.shape[-1] // bits * 32
        return unpack_planar(qzeros, bits, fields), fields
    fields = qzeros.shape[-1] * word_bits // bits if bits != 3 else qzeros.shape[-1] // 3 * 32
    return unpack_stream(qzeros, bits, fields), fields


def convert_zeros(
    qzeros: np.ndarray, bits: int, *, to: str, planar: bool = False, columns: int | None = None
) -> ZeroConversion:
    """Convert packed ``qzeros`` between v1 and v2 (``to`` = ``"v1"`` or ``"v2"``); input untouched.

    ``columns`` (the logical out_features) restricts the overflow count to real fields; padding
    fields at the end of the last word are then ignored.
    """
    if to not in ("v1", "v2"):
        raise LayoutError(f"zero convention: expected 'v1' or 'v2', found {to!r}")
    qzeros = np.asarray(qzeros)
    if qzeros.dtype.kind != "i":
        raise LayoutError(f"qzeros: expected a signed integer dtype, found {qzeros.dtype}")
    step = 1 if to == "v2" else -1
    top = (1 << bits) - 1
    codes, _ = _field_codes(qzeros, bits, planar)
    real = codes if columns is None else codes[..., :columns]
    overflow = int(np.count_nonzero(real == (top if step == 1 else 0)))
    if bits in (2, 4, 8):
        # Whole-word arithmetic (planar 2/4/8 words are the continuous words).
        unsigned = _UNSIGNED[qzeros.dtype.itemsize]
        const = unsigned(zero_word_constant(bits, qzeros.dtype.name))
        raw = qzeros.view(unsigned)
        moved = raw + const if step == 1 else raw - const
        return ZeroConversion(moved.view(qzeros.dtype).copy(), overflow, to)
    shifted = ((codes.astype(np.int16) + step) & top).astype(np.uint8)
    if planar:
        words = pack_planar(shifted, bits)
    else:
        words = pack_stream(shifted, bits, qzeros.dtype.name)
    return ZeroConversion(words.reshape(qzeros.shape).astype(qzeros.dtype, copy=False), overflow, to)


def v1_to_v2(qzeros: np.ndarray, bits: int, *, planar: bool = False, columns: int | None = None) -> ZeroConversion:
    """Legacy ``zero - 1`` words to true-zero words (carry fields reported in ``overflow_fields``)."""
    return convert_zeros(qzeros, bits, to="v2", planar=planar, columns=columns)


def v2_to_v1(qzeros: np.ndarray, bits: int, *, planar: bool = False, columns: int | None = None) -> ZeroConversion:
    """True-zero words to legacy ``zero - 1`` words (borrow fields reported in ``overflow_fields``)."""
    return convert_zeros(qzeros, bits, to="v1", planar=planar, columns=columns)
