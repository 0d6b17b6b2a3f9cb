"""Blockwise absmax quantization against a sorted code table, as bitsandbytes computes it.

For flat float32 values split into blocks of ``blocksize`` (the last block may be partial):
``absmax[b] = max |x|``, ``scaled = clamp(x * (1 / max(absmax, 1e-38)), -1, 1)`` in float32, and the
code is the index of the nearest table entry, found with the table's midpoints (a value exactly on a
midpoint takes the lower entry). Dequantization is ``table[code] * absmax[block]`` in float32.
"""

from __future__ import annotations

import numpy as np

_F32 = np.float32


def block_absmax(flat: np.ndarray, blocksize: int) -> np.ndarray:
    """float32 ``[ceil(n / blocksize)]`` absolute maxima of the blocks of ``flat``."""
    n = flat.size
    full = n - n % blocksize
    parts = [np.abs(flat[:full]).reshape(-1, blocksize).max(axis=1)] if full else []
    if n % blocksize:
        parts.append(np.abs(flat[full:]).max(keepdims=True))
    return np.concatenate(parts).astype(_F32) if parts else np.zeros(0, _F32)


def scale_blocks(flat: np.ndarray, absmax: np.ndarray, blocksize: int) -> np.ndarray:
    """``clamp(x * (1 / absmax_of_its_block), -1, 1)`` for every value (float32, flat)."""
    inv = (_F32(1) / np.maximum(absmax, _F32(1e-38))).astype(_F32)
    per_value = np.repeat(inv, blocksize)[: flat.size]
    result: np.ndarray = np.clip(flat * per_value, _F32(-1), _F32(1))
    return result


def nearest_codes(scaled: np.ndarray, table: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """uint8 index into ``table`` of the nearest entry (``order`` sorts an unsorted table)."""
    order = np.arange(table.size) if order is None else order
    ranked = table[order]
    bounds = ((ranked[:-1] + ranked[1:]) / _F32(2)).astype(_F32)
    return order[np.searchsorted(bounds, scaled, side="left")].astype(np.uint8)


def quantize_blockwise(flat: np.ndarray, table: np.ndarray, blocksize: int) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 codes ``[n]``, float32 absmax ``[blocks]``) of flat float32 values against ``table``."""
    values = np.asarray(flat, dtype=_F32).reshape(-1)
    absmax = block_absmax(values, blocksize)
    return nearest_codes(scale_blocks(values, absmax, blocksize), table), absmax


def dequantize_blockwise(codes: np.ndarray, absmax: np.ndarray, table: np.ndarray, blocksize: int) -> np.ndarray:
    """float32 ``[n]``: ``table[code] * absmax[block]``."""
    values = table[codes.reshape(-1)]
    result: np.ndarray = (values * np.repeat(absmax.astype(_F32), blocksize)[: values.size]).astype(_F32)
    return result
