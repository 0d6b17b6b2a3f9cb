"""EXL3 trellis codes: packing, the tail-biting 16-bit states, the codebooks and the tile order.

Shapes (``K = in``, ``N = out``, ``b`` = bits per weight, 1..8): ``trellis`` int16 ``[K/16, N/16, 16*b]``,
one 16x16 tile per ``[tk, tn]``; its ``16*b`` words hold 256 ``b``-bit **symbols**. Word layout: the words
are swapped in pairs (``[w1, w0, w3, w2, ...]``), then read as 16 groups of ``b`` words, each group a
big-endian stream of 16 symbols (symbol ``p`` at bits ``p*b .. p*b+b-1`` counted from the top of word 0).

The **state** of position ``i`` is the low 16 bits of the window of symbols ending at ``i``
(``ceil(16/b)`` symbols, most recent lowest), wrapping around the 256 symbols of the tile (tail-biting).
A codebook maps a state to a value (``3inst``, ``mcg``: a hashed pair of float16 halves summed;
``mul1``: a hashed byte sum read as float16, scaled and shifted). Tile position ``j`` of the decoded
stream is matrix element ``perm[j]`` (row-major in the 16x16 tile) of the tensor-core permutation.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

CODEBOOKS = ("mcg", "mul1", "3inst")
_MULT = {"3inst": 89226354, "mcg": 0xCBAC1FED, "mul1": 0x83DCD12D}
_ADD_3INST = 64248484
_LOP3_MASK, _LOP3_BIAS = 0x8FFF8FFF, 0x3B603B60
_MUL1_ACC = 0x6400
_MUL1_SCALE = np.array([0x1EEE, 0xC931], np.uint16).view(np.float16).astype(np.float32)  # (scale, bias)


@lru_cache(maxsize=3)
def codebook_values(codebook: str) -> np.ndarray:
    """float32 ``[65536]``: the value of every 16-bit state under ``codebook``."""
    states = np.arange(1 << 16, dtype=np.uint64)
    raw = states * np.uint64(_MULT[codebook])
    if codebook == "3inst":
        raw = raw + np.uint64(_ADD_3INST)
    raw &= np.uint64(0xFFFFFFFF)
    if codebook == "mul1":
        byte_sum = sum((raw >> np.uint64(8 * k)) & np.uint64(0xFF) for k in range(4))
        halves = ((byte_sum + np.uint64(_MUL1_ACC)) & np.uint64(0xFFFF)).astype(np.uint16)
        values: np.ndarray = halves.view(np.float16).astype(np.float32) * _MUL1_SCALE[0] + _MUL1_SCALE[1]
        return values.astype(np.float32)
    raw = np.uint64(_LOP3_BIAS) ^ (raw & np.uint64(_LOP3_MASK))
    pair = raw.astype(np.uint32).view(np.uint16).view(np.float16).astype(np.float32).reshape(-1, 2)
    summed: np.ndarray = pair[:, 0] + pair[:, 1]
    return summed


@lru_cache(maxsize=1)
def tile_perm() -> np.ndarray:
    """The 256-entry tensor-core order: decoded position ``j`` is tile element ``perm[j]`` (row-major)."""
    perm = np.empty(256, np.int64)
    for t in range(32):
        r, c = (t % 4) * 2, t // 4
        rows = (r, r + 1, r + 8, r + 9)
        perm[t * 8 : t * 8 + 8] = [row * 16 + col for col in (c, c + 8) for row in rows]
    return perm


def _bit_positions(bits: int) -> tuple[np.ndarray, np.ndarray]:
    """For the 16 symbols of a group: (word index, shift from the word's top) of each symbol's first bit."""
    offsets = np.arange(16) * bits
    return offsets // 16, offsets % 16


def unpack_symbols(trellis: np.ndarray, bits: int) -> np.ndarray:
    """int16 ``[..., 16*bits]`` -> uint8 symbols ``[..., 256]``."""
    words = (np.asarray(trellis).astype(np.int64) & 0xFFFF).reshape(*trellis.shape[:-1], -1, 2)[..., ::-1]
    words = words.reshape(*trellis.shape[:-1], 16, bits)
    padded = np.concatenate([words, np.zeros_like(words[..., :1])], axis=-1)  # a zero word past the end
    index, start = _bit_positions(bits)
    window = (padded[..., index] << 16) | padded[..., index + 1]  # 32 bits starting at the symbol's word
    symbols = (window >> (32 - start - bits)) & ((1 << bits) - 1)
    result: np.ndarray = symbols.reshape(*trellis.shape[:-1], 256).astype(np.uint8)
    return result


def pack_symbols(symbols: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of :func:`unpack_symbols`: uint8 ``[..., 256]`` -> int16 ``[..., 16*bits]``."""
    lead = symbols.shape[:-1]
    values = symbols.astype(np.int64).reshape(*lead, 16, 16)
    index, start = _bit_positions(bits)
    window = np.zeros((*lead, 16, bits + 1), np.int64)
    for p in range(16):  # 16 symbol slots per group, each OR-ed into a 32-bit window of two words
        placed = values[..., p] << (32 - start[p] - bits)
        window[..., index[p]] |= placed >> 16
        window[..., index[p] + 1] |= placed & 0xFFFF
    words = window[..., :bits].reshape(*lead, -1, 2)[..., ::-1].reshape(*lead, 16 * bits)
    return words.astype(np.uint16).view(np.int16)


def states(symbols: np.ndarray, bits: int) -> np.ndarray:
    """uint8 symbols ``[..., 256]`` -> the int64 16-bit state of every position (tail-biting windows)."""
    span = -(-16 // bits)
    values = symbols.astype(np.int64)
    out = np.zeros_like(values)
    for back in range(span):  # the symbol ``back`` positions earlier sits ``back * bits`` bits higher
        out |= np.roll(values, back, axis=-1) << (bits * back)
    return out & 0xFFFF
