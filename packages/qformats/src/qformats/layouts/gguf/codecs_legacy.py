"""The 32-element ggml block codecs: Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0.

Every function works on a batch of blocks: ``encode_*`` takes float32 ``[n, 32]`` and returns uint8
``[n, type_size]``; ``decode_*`` takes uint8 ``[n, type_size]`` and returns float32 ``[n, 32]``.
The arithmetic (float32 throughout, the same operation order, fp16 rounding of the stored scales)
is that of ggml's reference quantizers as the ``gguf`` package reproduces them, so the bytes and
the decoded values agree bit for bit. Within a block, element ``j`` sits in the low nibble of byte
``j`` and element ``j + 16`` in the high nibble; the fifth bit of Q5 codes is a little-endian
32-bit mask.
"""

from __future__ import annotations

import numpy as np

_F32 = np.float32


def _fp16_bytes(values: np.ndarray) -> np.ndarray:
    """float32 ``[n, 1]`` -> the little-endian fp16 bytes ``[n, 2]``."""
    return values.astype(np.float16).view(np.uint8).reshape(-1, 2)


def _fp16_at(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The fp16 stored at byte ``offset`` of each block, as float32 ``[n, 1]``."""
    return np.ascontiguousarray(blocks[:, offset : offset + 2]).view(np.float16).astype(_F32)


def _pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """uint8 codes ``[n, 32]`` (low 4 bits used) -> ``[n, 16]``: j low, j + 16 high."""
    half = codes.shape[1] // 2
    return (codes[:, :half] & np.uint8(0x0F)) | (codes[:, half:] << np.uint8(4))


def _unpack_nibbles(packed: np.ndarray) -> np.ndarray:
    """``[n, 16]`` -> uint8 ``[n, 32]`` in element order (inverse of :func:`_pack_nibbles`)."""
    return np.concatenate([packed & np.uint8(0x0F), packed >> np.uint8(4)], axis=1)


def _high_bit_mask(codes: np.ndarray) -> np.ndarray:
    """Bit 4 of each of the 32 codes as a little-endian 32-bit mask ``[n, 4]``."""
    return np.packbits(codes >> np.uint8(4), axis=1, bitorder="little")


def _high_bits(mask: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_high_bit_mask`: ``[n, 4]`` -> uint8 ``[n, 32]`` of 0/1."""
    return np.unpackbits(mask, axis=1, bitorder="little")


def _signed_absmax(blocks: np.ndarray) -> np.ndarray:
    """The value of largest magnitude of each block, sign kept (first one on ties), ``[n, 1]``."""
    where = np.abs(blocks).argmax(axis=1)[:, None]
    return np.take_along_axis(blocks, where, axis=1)


def _inverse(d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(d == 0, _F32(0), _F32(1) / d).astype(_F32)


def _round_half_away(values: np.ndarray) -> np.ndarray:
    """C ``roundf``: halves round away from zero."""
    magnitude = np.abs(values)
    whole = np.floor(magnitude)
    result: np.ndarray = np.sign(values) * (whole + np.floor(_F32(2) * (magnitude - whole)))
    return result


def encode_q4_0(blocks: np.ndarray) -> np.ndarray:
    d = _signed_absmax(blocks) / _F32(-8)
    codes = np.trunc(blocks * _inverse(d) + _F32(8.5)).astype(np.uint8).clip(0, 15)
    return np.concatenate([_fp16_bytes(d), _pack_nibbles(codes)], axis=1)


def decode_q4_0(blocks: np.ndarray) -> np.ndarray:
    d = _fp16_at(blocks, 0)
    codes = _unpack_nibbles(blocks[:, 2:]).astype(np.int8) - np.int8(8)
    return d * codes.astype(_F32)


def _min_max_step(blocks: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray]:
    low = blocks.min(axis=1, keepdims=True)
    return low, (blocks.max(axis=1, keepdims=True) - low) / _F32(levels)


def encode_q4_1(blocks: np.ndarray) -> np.ndarray:
    low, d = _min_max_step(blocks, 15)
    codes = np.trunc((blocks - low) * _inverse(d) + _F32(0.5)).astype(np.uint8).clip(0, 15)
    return np.concatenate([_fp16_bytes(d), _fp16_bytes(low), _pack_nibbles(codes)], axis=1)


def decode_q4_1(blocks: np.ndarray) -> np.ndarray:
    d, m = _fp16_at(blocks, 0), _fp16_at(blocks, 2)
    packed = blocks[:, 4:]
    values = np.empty((blocks.shape[0], 32), dtype=_F32)
    np.bitwise_and(packed, np.uint8(0x0F), out=values[:, :16], casting="unsafe")
    np.right_shift(packed, np.uint8(4), out=values[:, 16:], casting="unsafe")
    values *= d  # in place: the same two roundings as d * q + m, fewer temporaries
    values += m
    return values


def encode_q5_0(blocks: np.ndarray) -> np.ndarray:
    d = _signed_absmax(blocks) / _F32(-16)
    codes = np.trunc(blocks * _inverse(d) + _F32(16.5)).astype(np.uint8).clip(0, 31)
    return np.concatenate([_fp16_bytes(d), _high_bit_mask(codes), _pack_nibbles(codes)], axis=1)


def decode_q5_0(blocks: np.ndarray) -> np.ndarray:
    d = _fp16_at(blocks, 0)
    codes = _unpack_nibbles(blocks[:, 6:]) | (_high_bits(blocks[:, 2:6]) << np.uint8(4))
    result: np.ndarray = d * (codes.astype(np.int8) - np.int8(16)).astype(_F32)
    return result


def encode_q5_1(blocks: np.ndarray) -> np.ndarray:
    low, d = _min_max_step(blocks, 31)
    codes = np.trunc((blocks - low) * _inverse(d) + _F32(0.5)).astype(np.uint8).clip(0, 31)
    parts = [_fp16_bytes(d), _fp16_bytes(low), _high_bit_mask(codes), _pack_nibbles(codes)]
    return np.concatenate(parts, axis=1)


def decode_q5_1(blocks: np.ndarray) -> np.ndarray:
    d, m = _fp16_at(blocks, 0), _fp16_at(blocks, 2)
    codes = _unpack_nibbles(blocks[:, 8:]) | (_high_bits(blocks[:, 4:8]) << np.uint8(4))
    result: np.ndarray = d * codes.astype(_F32) + m
    return result


def encode_q8_0(blocks: np.ndarray) -> np.ndarray:
    d = np.abs(blocks).max(axis=1, keepdims=True) / _F32(127)
    codes = _round_half_away(blocks * _inverse(d)).astype(np.int8)
    return np.concatenate([_fp16_bytes(d), codes.view(np.uint8)], axis=1)


def decode_q8_0(blocks: np.ndarray) -> np.ndarray:
    values = blocks[:, 2:].view(np.int8).astype(_F32)
    values *= _fp16_at(blocks, 0)
    return values
