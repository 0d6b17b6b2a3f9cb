"""Continuous little-endian bit streams of b-bit codes packed into integer words (vectorized numpy).

GPTQ's continuous layout is one bit stream per packed line: code ``k`` occupies bits
``[b*k, b*k + b)`` of the stream, and word ``w`` holds stream bits ``[W*w, W*(w+1))`` (W = word bits).
For 2/4/8 bits every word holds ``W/b`` whole codes (code j of a word at shift ``b*j``); for 3 bits
codes 10 and 21 of every 32-code block straddle words, which the byte-level stream handles naturally.

Both functions work along the **last axis** of an array of any rank and never mutate their input.
The implementation goes through bytes: codes are combined into little-endian bytes with whole-array
shifts, and the bytes are reinterpreted as words (a view, no per-element loop).
"""

from __future__ import annotations

import numpy as np

from ...errors import LayoutError

WORD_DTYPES: dict[str, np.dtype] = {
    "int8": np.dtype("<i1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
}


def word_dtype(name: str) -> np.dtype:
    """The little-endian numpy dtype of a pack word name (``"int32"``), or :class:`LayoutError`."""
    try:
        return WORD_DTYPES[str(name)]
    except KeyError:
        raise LayoutError(f"pack_dtype: expected one of {', '.join(WORD_DTYPES)}, found {name!r}") from None


def block_codes(bits: int, word_bits: int) -> int:
    """Codes per packing block: ``W/b`` (one word) for 1/2/4/8 bits, 32 (three words) for 3 bits."""
    if bits == 3:
        return 32
    return word_bits // bits


def stream_words(n: int, bits: int, word_bits: int) -> int:
    """Number of words holding ``n`` codes: the stream is padded with zero codes to whole blocks."""
    per_block = block_codes(bits, word_bits)
    blocks = -(-n // per_block)
    return blocks * per_block * bits // word_bits


def _check(bits: int, word_bits: int) -> None:
    if bits not in (1, 2, 3, 4, 8):
        raise LayoutError(f"bits: continuous packing supports 1, 2, 3, 4 or 8 bits, found {bits}")
    if bits == 3 and word_bits != 32:
        raise LayoutError(f"pack_dtype: 3-bit continuous packing requires int32 words, found int{word_bits}")


def pack_stream(codes: np.ndarray, bits: int, pack_dtype: str = "int32") -> np.ndarray:
    """Pack ``codes[..., n]`` (values in ``[0, 2**bits)``) into words ``[..., stream_words(n)]``.

    Values are taken modulo ``2**bits`` (callers check ranges first); the tail is zero-padded.
    """
    wdt = word_dtype(pack_dtype)
    word_bits = wdt.itemsize * 8
    _check(bits, word_bits)
    codes = np.asarray(codes)
    lead, n = codes.shape[:-1], codes.shape[-1]
    padded = stream_words(n, bits, word_bits) * word_bits // bits
    src = codes.astype(np.uint8, copy=False)
    if padded != n:
        full = np.zeros((*lead, padded), dtype=np.uint8)
        full[..., :n] = src
        src = full
    if bits == 3:
        # Eight 3-bit codes make 24 bits = 3 bytes of the stream.
        octets = src.reshape(*lead, padded // 8, 8)
        acc = np.zeros(octets.shape[:-1], dtype=np.uint32)
        for j in range(8):
            acc |= (octets[..., j].astype(np.uint32) & 7) << np.uint32(3 * j)
        stream = np.empty((*acc.shape, 3), dtype=np.uint8)
        stream[..., 0] = acc
        stream[..., 1] = acc >> np.uint32(8)
        stream[..., 2] = acc >> np.uint32(16)
    elif bits == 8:
        stream = np.ascontiguousarray(src)
    else:
        per_byte = 8 // bits
        mask = np.uint8((1 << bits) - 1)
        groups = src.reshape(*lead, padded // per_byte, per_byte)
        stream = groups[..., 0] & mask
        for j in range(1, per_byte):
            stream = stream | ((groups[..., j] & mask) << np.uint8(bits * j))
    stream = np.ascontiguousarray(stream).reshape(*lead, padded * bits // 8)
    return stream.view(wdt)


def unpack_stream(words: np.ndarray, bits: int, n: int) -> np.ndarray:
    """Unpack ``words[..., w]`` (any int dtype of 8..64 bits) into uint8 codes ``[..., n]``.

    ``n`` must not exceed the codes the words hold; trailing padding codes are dropped.
    """
    words = np.asarray(words)
    if words.dtype.kind not in "iu":
        raise LayoutError(f"packed words: expected an integer dtype, found {words.dtype}")
    word_bits = words.dtype.itemsize * 8
    _check(bits, word_bits)
    lead, count = words.shape[:-1], words.shape[-1]
    capacity = count * word_bits // bits if bits != 3 else count // 3 * 32
    if n > capacity:
        raise LayoutError(f"packed words: {count} words of int{word_bits} hold {capacity} {bits}-bit codes, need {n}")
    little = np.ascontiguousarray(words, dtype=words.dtype.newbyteorder("<"))
    stream = little.view(np.uint8).reshape(*lead, count * words.dtype.itemsize)
    if bits == 3:
        usable = count // 3 * 12
        trip = stream[..., :usable].reshape(*lead, usable // 3, 3).astype(np.uint32)
        acc = trip[..., 0] | (trip[..., 1] << np.uint32(8)) | (trip[..., 2] << np.uint32(16))
        out = np.empty((*acc.shape, 8), dtype=np.uint8)
        for j in range(8):
            out[..., j] = (acc >> np.uint32(3 * j)) & np.uint32(7)
        codes = out.reshape(*lead, usable // 3 * 8)
    elif bits == 8:
        codes = stream.copy()  # the stream may be a view of the caller's words
    else:
        per_byte = 8 // bits
        mask = np.uint8((1 << bits) - 1)
        out = np.empty((*stream.shape, per_byte), dtype=np.uint8)
        for j in range(per_byte):
            out[..., j] = (stream >> np.uint8(bits * j)) & mask
        codes = out.reshape(*lead, stream.shape[-1] * per_byte)
    return np.ascontiguousarray(codes[..., :n])
