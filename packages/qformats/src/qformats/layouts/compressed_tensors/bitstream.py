"""Dense b-bit streams in int32 words, as compressed-tensors' ``pack-quantized`` format lays them out.

Code ``k`` of a packed line occupies stream bits ``[b*k, b*k + b)``; word ``w`` holds stream bits
``[32*w, 32*w + 32)`` little-end first, so a code may straddle two words for b = 3, 5, 6, 7. A line of
``n`` codes takes exactly ``ceil(n * b / 32)`` words (no padding to 32-code blocks, unlike GPTQ's
3-bit layout); the unused high bits of the last word are zero.

For b in 1, 2, 4, 8 the stream equals GPTQ's continuous stream word for word, so those widths reuse
:mod:`qformats.layouts.gptq.bitstream`; the others pack through a bit matrix and unpack per
32-code block (exactly ``b`` words), one shift-and-mask per code position. Both functions work along
the **last axis** and never mutate their input.
"""

from __future__ import annotations

import numpy as np

from ...errors import LayoutError
from ..gptq.bitstream import pack_stream, unpack_stream

WHOLE_WORD_BITS = (1, 2, 4, 8)


def dense_words(n: int, bits: int) -> int:
    """int32 words holding ``n`` codes of ``bits``: ``ceil(n * bits / 32)``."""
    return -(-n * bits // 32)


def _check_bits(bits: int) -> None:
    if not 1 <= bits <= 8:
        raise LayoutError(f"bits: pack-quantized stores 1..8-bit codes, found {bits}")


def pack_dense(codes: np.ndarray, bits: int) -> np.ndarray:
    """uint8 ``codes[..., n]`` (values in ``[0, 2**bits)``) -> int32 ``[..., ceil(n*bits/32)]``."""
    _check_bits(bits)
    codes = np.asarray(codes)
    if codes.size and (int(codes.min()) < 0 or int(codes.max()) >= 1 << bits):
        raise LayoutError(f"codes: expected values in [0, {(1 << bits) - 1}] for {bits}-bit packing")
    if bits in WHOLE_WORD_BITS:
        return np.asarray(pack_stream(codes, bits, "int32", trusted=True))
    lead, n = codes.shape[:-1], codes.shape[-1]
    words = dense_words(n, bits)
    planes = np.unpackbits(codes.astype(np.uint8)[..., None], axis=-1, bitorder="little")[..., :bits]
    stream = np.zeros((*lead, words * 32), dtype=np.uint8)
    stream[..., : n * bits] = planes.reshape(*lead, n * bits)
    packed = np.packbits(stream, axis=-1, bitorder="little")
    return np.ascontiguousarray(packed).view("<i4").astype(np.int32)


def unpack_dense(words: np.ndarray, bits: int, n: int) -> np.ndarray:
    """int32 ``words[..., w]`` -> uint8 codes ``[..., n]`` (``n`` at most ``w * 32 // bits``)."""
    _check_bits(bits)
    words = np.asarray(words)
    if words.dtype != np.int32:
        raise LayoutError(f"packed words: expected int32, found {words.dtype}")
    count = words.shape[-1]
    if n * bits > count * 32:
        raise LayoutError(f"packed words: {count} int32 words hold {count * 32 // bits} {bits}-bit codes, need {n}")
    if bits in WHOLE_WORD_BITS:
        return np.asarray(unpack_stream(words, bits, n))
    lead = words.shape[:-1]
    blocks = -(-n // 32)  # every 32 codes fill exactly ``bits`` words
    full = np.zeros((*lead, blocks * bits), dtype=np.uint32)
    usable = min(count, blocks * bits)
    full[..., :usable] = np.ascontiguousarray(words[..., :usable]).view(np.uint32)
    grouped = full.reshape(*lead, blocks, bits)
    out = np.empty((*lead, blocks, 32), dtype=np.uint8)
    mask = np.uint32((1 << bits) - 1)
    for j in range(32):
        word, shift = divmod(j * bits, 32)
        value = grouped[..., word] >> np.uint32(shift)
        if shift + bits > 32:  # the code straddles into the next word
            value = value | (grouped[..., word + 1] << np.uint32(32 - shift))
        out[..., j] = value & mask
    return np.ascontiguousarray(out.reshape(*lead, blocks * 32)[..., :n])
