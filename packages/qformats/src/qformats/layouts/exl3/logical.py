"""The logical EXL3 weight: trellis symbols per 16x16 tile, a codebook, and the two Hadamard-side scales.

Fields (``K = in``, ``N = out``, both multiples of 128): ``symbols`` uint8 ``[K/16, N/16, 256]`` (``bits``-bit
trellis codes, see :mod:`.trellis`), ``bits`` (1..8), ``codebook`` (``mcg``, ``mul1`` or ``3inst``),
``suh`` ``[K]`` and ``svh`` ``[N]`` (kept as stored).

Dense weight, as the reference's CPU path builds it in float32: decode every tile (state -> codebook value,
tensor-core order) into ``inner [K, N]``; ``inner = H_K @ inner`` (block-diagonal 128x128 Hadamard,
normalized by ``1/sqrt(128)``), times ``suh`` per row; ``inner = inner @ H_N``, times ``svh`` per column;
the layer's ``[out, in]`` weight is its transpose. The Hadamard products are float32 matrix products, so
they agree with the reference's to float32 rounding (summation order), not bit for bit; ``inner`` is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...errors import LayoutError
from .trellis import CODEBOOKS, codebook_values, states, tile_perm

HADAMARD = 128


@lru_cache(maxsize=1)
def hadamard() -> np.ndarray:
    """The float32 128x128 Sylvester Hadamard matrix times ``1/sqrt(128)``."""
    h = np.ones((1, 1), np.float32)
    while h.shape[0] < HADAMARD:
        h = np.block([[h, h], [h, -h]])
    scaled: np.ndarray = (h * np.float32(1.0 / np.sqrt(128.0))).astype(np.float32)
    return scaled


@dataclass(frozen=True, eq=False)
class EXL3Weight:
    """An EXL3 weight in layout-independent form (see the module docstring)."""

    symbols: np.ndarray
    bits: int
    codebook: str
    suh: np.ndarray
    svh: np.ndarray

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 8:
            raise LayoutError(f"bits: expected 1..8 trellis bits per weight, found {self.bits}")
        if self.codebook not in CODEBOOKS:
            raise LayoutError(f"codebook: expected one of {CODEBOOKS}, found {self.codebook!r}")
        if self.symbols.dtype != np.uint8 or self.symbols.ndim != 3 or self.symbols.shape[2] != 256:
            raise LayoutError(
                f"symbols: expected uint8 [K/16, N/16, 256], found {self.symbols.dtype} {self.symbols.shape}"
            )
        k, n = self.in_features, self.out_features
        if k % HADAMARD or n % HADAMARD:
            raise LayoutError(f"symbols: EXL3 needs in and out divisible by 128, found in={k}, out={n}")
        if self.symbols.size and int(self.symbols.max()) >> self.bits:
            raise LayoutError(f"symbols: expected {self.bits}-bit codes, found {int(self.symbols.max())}")
        for name, size in (("suh", k), ("svh", n)):
            value = getattr(self, name)
            if value.shape != (size,):
                raise LayoutError(f"{name}: expected shape ({size},), found {value.shape}")

    @property
    def in_features(self) -> int:
        return int(self.symbols.shape[0]) * 16

    @property
    def out_features(self) -> int:
        return int(self.symbols.shape[1]) * 16

    def inner(self) -> np.ndarray:
        """float32 ``[K, N]``: the decoded trellis before the Hadamard sides (exact)."""
        decoded = codebook_values(self.codebook)[states(self.symbols, self.bits)]
        tiles = np.empty_like(decoded)
        tiles[..., tile_perm()] = decoded
        tk, tn = self.symbols.shape[:2]
        result: np.ndarray = tiles.reshape(tk, tn, 16, 16).transpose(0, 2, 1, 3).reshape(tk * 16, tn * 16)
        return result

    def dequantize(self) -> np.ndarray:
        """float32 ``[out, in]`` (see the module docstring)."""
        k, n = self.in_features, self.out_features
        h = hadamard()
        w = (h @ self.inner().reshape(k // HADAMARD, HADAMARD, n)).reshape(k, n)
        w = w * self.suh.astype(np.float32)[:, None]
        w = (w.reshape(k, n // HADAMARD, HADAMARD) @ h).reshape(k, n)
        w = w * self.svh.astype(np.float32)[None, :]
        return np.ascontiguousarray(w.T, dtype=np.float32)
