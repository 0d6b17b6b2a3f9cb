"""FP8 element formats in numpy: decode tables and round-to-nearest-even encoding.

Codes are uint8 bit patterns (numpy has no float8 dtype). Encoding takes float32 and rounds to the
nearest representable value, ties to even, exactly as torch's float8 casts do, including what those
casts do outside the finite range:

=================  ====  ====  =========  ===================================================
format             bias  max   zero/NaN   overflow (after rounding) and +-inf
=================  ====  ====  =========  ===================================================
float8_e4m3fn      7     448   +-0, 0x7F  saturates to +-448 (inf too)
float8_e5m2        15    57344 +-0, 0x7F  +-inf (0x7C / 0xFC)
float8_e4m3fnuz    8     240   0, 0x80    NaN (0x80); -0 encodes as 0
float8_e5m2fnuz    16    57344 0, 0x80    NaN (0x80); -0 encodes as 0
float8_e8m0fnu     127   2^127 none, 0xFF decode only: ``2 ** (code - 127)``
=================  ====  ====  =========  ===================================================

NaN inputs encode to the format's NaN (sign kept where the format has signed NaNs).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ...errors import UnsupportedLayoutError


@dataclass(frozen=True)
class FP8Format:
    """One 8-bit float format. ``fnuz``: no negative zero, single NaN at 0x80, no infinities."""

    name: str
    exponent_bits: int
    mantissa_bits: int
    bias: int
    fnuz: bool = False
    has_inf: bool = False
    saturating: bool = False

    @property
    def encodable(self) -> bool:
        return self.mantissa_bits > 0

    @cached_property
    def table(self) -> np.ndarray:
        """float32 ``[256]``: the value of every code."""
        codes = np.arange(256, dtype=np.int64)
        if self.mantissa_bits == 0:  # e8m0: exponent only, 0xFF is NaN
            values = np.ldexp(1.0, codes - self.bias)
            values[255] = np.nan
            return values.astype(np.float32)
        m_mask = (1 << self.mantissa_bits) - 1
        e_max = (1 << self.exponent_bits) - 1
        sign = np.where(codes & 0x80, -1.0, 1.0)
        exp = (codes >> self.mantissa_bits) & e_max
        man = codes & m_mask
        normal = np.ldexp(1.0 + man / (m_mask + 1), exp - self.bias)
        subnormal = np.ldexp(man / (m_mask + 1), 1 - self.bias)
        values = sign * np.where(exp == 0, subnormal, normal)
        if self.fnuz:
            values[0x80] = np.nan
        elif self.has_inf:
            values[(exp == e_max) & (man == 0)] = sign[(exp == e_max) & (man == 0)] * np.inf
            nan = (exp == e_max) & (man != 0)
            values[nan] = np.copysign(np.nan, sign[nan])
        else:
            nan = (exp == e_max) & (man == m_mask)
            values[nan] = np.copysign(np.nan, sign[nan])
        return values.astype(np.float32)

    @cached_property
    def max(self) -> float:
        """Largest finite value."""
        return float(np.nanmax(np.where(np.isinf(self.table), np.nan, self.table)))

    def decode(self, codes: np.ndarray) -> np.ndarray:
        """uint8 codes -> float32 values (same shape)."""
        if codes.dtype != np.uint8:
            raise UnsupportedLayoutError(f"{self.name}: expected uint8 codes, found {codes.dtype}")
        result: np.ndarray = self.table[codes]
        return result

    def encode(self, values: np.ndarray) -> np.ndarray:
        """float32 values -> uint8 codes, round to nearest even (torch's cast, see the module table)."""
        if not self.encodable:
            raise UnsupportedLayoutError(f"{self.name} is a decode-only format (scales of existing checkpoints)")
        min_exp = 1 - self.bias
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            x = np.asarray(values, dtype=np.float32).astype(np.float64)
            mag = np.abs(x)
            exp = np.maximum(np.frexp(mag)[1] - 1, min_exp)
            quantum = np.ldexp(1.0, exp - self.mantissa_bits)
            rounded = np.rint(mag / quantum) * quantum  # exact in float64; rint ties to even
            r_exp = np.frexp(rounded)[1] - 1
            is_normal = (rounded > 0) & (r_exp >= min_exp)
            field = np.where(is_normal, r_exp - min_exp + 1, 0)
            scale = np.ldexp(1.0, np.where(is_normal, r_exp, min_exp) - self.mantissa_bits)
            mant = np.rint(rounded / scale).astype(np.int64) - np.where(is_normal, 1 << self.mantissa_bits, 0)
            mant = np.where(np.isfinite(mant), mant, 0)
        negative = np.signbit(x)
        body = (field.astype(np.int64) << self.mantissa_bits) | mant
        overflow = ~(rounded <= self.max)  # also inf and nan
        nan = np.isnan(x)
        if self.fnuz:
            codes = np.where(negative & (body != 0), body | 0x80, body)
            codes = np.where(overflow | nan, 0x80, codes)
        else:
            sign = np.where(negative, 0x80, 0)
            max_code = int(np.flatnonzero(self.table[:128] == self.max)[0])
            big = (1 << (self.exponent_bits + self.mantissa_bits)) - (1 << self.mantissa_bits)  # inf pattern
            codes = sign | np.where(overflow, max_code if self.saturating else big, body)
            codes = np.where(nan, sign | 0x7F, codes)
        return codes.astype(np.uint8)


FORMATS: dict[str, FP8Format] = {
    f.name: f
    for f in (
        FP8Format("float8_e4m3fn", 4, 3, 7, saturating=True),
        FP8Format("float8_e5m2", 5, 2, 15, has_inf=True),
        FP8Format("float8_e4m3fnuz", 4, 3, 8, fnuz=True),
        FP8Format("float8_e5m2fnuz", 5, 2, 16, fnuz=True),
        FP8Format("float8_e8m0fnu", 8, 0, 127),
    )
}
ALIASES = {"e4m3": "float8_e4m3fn", "e4m3fn": "float8_e4m3fn", "e5m2": "float8_e5m2",
           "e4m3fnuz": "float8_e4m3fnuz", "e5m2fnuz": "float8_e5m2fnuz", "e8m0": "float8_e8m0fnu",
           "e8m0fnu": "float8_e8m0fnu", "fp8": "float8_e4m3fn"}  # fmt: skip


def fp8_format(name: str) -> FP8Format:
    """Resolve ``float8_e4m3fn``, ``e4m3``, ``e5m2``, ... to an :class:`FP8Format`."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    found = FORMATS.get(key)
    if found is None:
        raise UnsupportedLayoutError(f"FP8 format {name!r} is not supported; known: {', '.join(FORMATS)}")
    return found
