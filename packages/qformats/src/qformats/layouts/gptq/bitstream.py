"""Continuous little-endian bit streams of b-bit codes packed into integer words (vectorized numpy).

GPTQ's continuous layout is one bit stream per packed line: code ``k`` occupies bits
``[b*k, b*k + b)`` of the stream, and word ``w`` holds stream bits ``[W*w, W*(w+1))`` (W = word bits).
For 2/4/8 bits every word holds ``W/b`` whole codes (code j of a word at shift ``b*j``); for 3 bits
codes 10 and 21 of every 32-code block straddle words, which the byte-level stream handles naturally.

Both functions work along the **last axis** of an array of any rank and never mutate their input.
The implementation goes through bytes: codes are combined into little-endian bytes with whole-array
shift-or stages over wide integer lanes, and the bytes are reinterpreted as words (a view, no
per-element loop).
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


def _lane_masks(width: int, lane_bits: int, total_bits: int) -> int:
    """A mask with the low ``width`` bits set in every ``lane_bits``-wide lane of a ``total_bits`` word."""
    return sum(((1 << width) - 1) << (lane_bits * j) for j in range(total_bits // lane_bits))


def _bytes_from_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Combine ``8/bits`` in-range codes per byte (little-end first) with whole-array shift-or stages.

    The codes are viewed as one ``8/bits``-byte lane per output byte; each stage merges pairs of
    sub-lanes (``x | x >> shift``), halving the lane count, so 4-bit takes one stage, 2-bit two.
    """
    per_byte = 8 // bits
    if per_byte == 1:
        return np.array(codes, dtype=np.uint8, copy=True)
    total = 8 * per_byte
    x = np.ascontiguousarray(codes, dtype=np.uint8).view(np.dtype(f"<u{per_byte}"))
    width, lane = bits, 8
    while lane < total:
        merged = x >> np.array(lane - width, dtype=x.dtype)
        merged |= x
        width, lane = width * 2, lane * 2
        if lane < total:
            merged &= np.array(_lane_masks(width, lane, total), dtype=x.dtype)
        x = merged
    return x.astype(np.uint8)


def _codes_from_bytes(stream: np.ndarray, bits: int) -> np.ndarray:
    """Split every byte of ``stream[..., m]`` into ``8/bits`` codes: uint8 ``[..., m * 8/bits]``."""
    per_byte = 8 // bits
    if per_byte == 1:
        return np.array(stream, dtype=np.uint8, copy=True)
    total = 8 * per_byte
    x = stream.astype(np.dtype(f"<u{per_byte}"))
    width, lane = 8, total
    while lane > 8:
        half, part = lane // 2, width // 2
        spread = x << np.array(half - part, dtype=x.dtype)
        spread |= x
        spread &= np.array(_lane_masks(part, half, total), dtype=x.dtype)
        x, width, lane = spread, part, half
    return x.view(np.uint8).reshape(*stream.shape[:-1], stream.shape[-1] * per_byte)


def pack_stream(codes: np.ndarray, bits: int, pack_dtype: str = "int32", *, trusted: bool = False) -> np.ndarray:
    """Pack ``codes[..., n]`` (values in ``[0, 2**bits)``) into words ``[..., stream_words(n)]``.

    The tail is zero-padded to whole words (3-bit: whole 32-code blocks). Out-of-range values raise
    :class:`LayoutError` unless ``trusted`` (the caller already checked them, e.g. a
    :class:`~qformats.logical.QuantizedWeight`).
    """
    wdt = word_dtype(pack_dtype)
    word_bits = wdt.itemsize * 8
    _check(bits, word_bits)
    codes = np.asarray(codes)
    if not trusted and codes.size and (int(codes.max()) >= 1 << bits or int(codes.min()) < 0):
        raise LayoutError(f"codes: expected values in [0, {(1 << bits) - 1}] for {bits}-bit packing")
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
            acc |= octets[..., j].astype(np.uint32) << np.uint32(3 * j)
        stream = np.empty((*acc.shape, 3), dtype=np.uint8)
        stream[..., 0] = acc
        stream[..., 1] = acc >> np.uint32(8)
        stream[..., 2] = acc >> np.uint32(16)
    else:
        stream = _bytes_from_codes(src, bits)
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
    else:
        needed = -(-n * bits // 8)
        codes = _codes_from_bytes(stream[..., :needed], bits)
    if codes.shape[-1] == n:
        return codes
    return np.ascontiguousarray(codes[..., :n])
