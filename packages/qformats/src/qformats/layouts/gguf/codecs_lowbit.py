"""The 1- and 2-bit ggml block codecs: Q1_0 (type 41, a.k.a. Prism ``Q1_0_g128``) and Q2_0 (type 42).

* Q1_0: 128 elements in 18 bytes: fp16 ``d`` then 16 bytes of sign bits, least significant bit
  first. Bit 1 decodes to ``+d``, bit 0 to ``-d``. The reference quantizer stores ``d`` = the block's
  mean absolute value (``numpy.mean`` in float32, rounded to fp16) and bit = ``x >= 0``. ggml's C
  quantizer sums ``|x|`` sequentially instead of pairwise, so in rare blocks its fp16 scale differs
  from the reference toolkit's (and ours) by one unit in the last place; the sign bits always agree.
* Q2_0: 64 elements in 18 bytes: fp16 ``d`` then 16 bytes of 2-bit codes, four per byte, least
  significant pair first. Code ``c`` decodes to ``(c - 1) * d``, i.e. one of ``-d, 0, +d, +2d``.
  Decoding only: the reference's Q2_0 quantizer could not be verified byte for byte, so qformats
  does not write Q2_0 (see docs/formats-gguf.md).
"""

from __future__ import annotations

import numpy as np

_F32 = np.float32


def _scale(blocks: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(blocks[:, :2]).view(np.float16).astype(_F32)


def encode_q1_0(blocks: np.ndarray) -> np.ndarray:
    d = np.mean(np.abs(blocks), axis=1).astype(np.float16).view(np.uint8).reshape(-1, 2)
    signs = np.packbits((blocks >= 0).astype(np.uint8), axis=1, bitorder="little")
    return np.concatenate([d, signs], axis=1)


def decode_q1_0(blocks: np.ndarray) -> np.ndarray:
    d = _scale(blocks)
    bits = np.unpackbits(blocks[:, 2:], axis=1, bitorder="little")
    return np.where(bits == 1, d, -d).astype(_F32)


def decode_q2_0(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d = _scale(blocks)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4)
    codes = ((blocks[:, 2:, None] >> shifts) & np.uint8(3)).reshape(n, 64)
    result: np.ndarray = (codes.astype(_F32) - _F32(1)) * d
    return result
