"""The 256-element ggml "K" super-block codecs: Q2_K, Q3_K, Q4_K, Q5_K and Q6_K.

``decode_*`` takes uint8 ``[n, type_size]`` and returns float32 ``[n, 256]`` with the arithmetic of
ggml's ``dequantize_row_*`` as the ``gguf`` package reproduces it (bit for bit). ``encode_*`` exists
for Q4_K, Q5_K and Q6_K, the K types the reference toolkit writes; it follows the reference's own
block quantizer (sub-block scales from the sub-block range, 6-bit or 8-bit quantized against the
largest one, codes rounded half to even), not llama.cpp's iterative ``make_qkx2_quants`` search.

Byte layouts (per super-block):

* Q2_K (84): ``scales[16]`` (low nibble scale, high nibble min), ``qs[64]``, fp16 ``d``, fp16 ``dmin``.
* Q3_K (110): ``hmask[32]``, ``qs[64]``, ``scales[12]`` (6-bit, offset 32), fp16 ``d``.
* Q4_K (144): fp16 ``d``, fp16 ``dmin``, ``scales[12]`` (eight 6-bit scales and mins), ``qs[128]``.
* Q5_K (176): as Q4_K plus ``qh[32]`` (bit ``i`` of byte ``l`` = high bit of sub-block ``i``) before ``qs``.
* Q6_K (210): ``ql[128]``, ``qh[64]``, int8 ``scales[16]``, fp16 ``d``.
"""

from __future__ import annotations

import numpy as np

_F32 = np.float32
_U8 = np.uint8


def _fp16_at(blocks: np.ndarray, offset: int) -> np.ndarray:
    return np.ascontiguousarray(blocks[:, offset : offset + 2]).view(np.float16).astype(_F32)


def _shifted(data: np.ndarray, groups: int, width: int, shifts: tuple[int, ...], mask: int) -> np.ndarray:
    """Split ``data [n, groups*width]`` into ``[n, groups*len(shifts), width]`` bit fields."""
    n = data.shape[0]
    fields = data.reshape(n, groups, 1, width) >> np.array(shifts, dtype=_U8).reshape(1, 1, -1, 1)
    return (fields & _U8(mask)).reshape(n, groups * len(shifts), width)


def decode_q2_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    scales, qs = blocks[:, :16], blocks[:, 16:80]
    d, dmin = _fp16_at(blocks, 80), _fp16_at(blocks, 82)
    dl = (d * (scales & _U8(0xF)).astype(_F32)).reshape(n, 16, 1)
    ml = (dmin * (scales >> _U8(4)).astype(_F32)).reshape(n, 16, 1)
    q = _shifted(qs, 2, 32, (0, 2, 4, 6), 3).reshape(n, 16, 16).astype(_F32)
    result: np.ndarray = (dl * q - ml).reshape(n, 256)
    return result


def decode_q3_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    hmask, qs, packed, d = blocks[:, :32], blocks[:, 32:96], blocks[:, 96:108], _fp16_at(blocks, 108)
    low = (packed[:, :8].reshape(n, 1, 8) >> np.array([0, 4], dtype=_U8).reshape(1, 2, 1)).reshape(n, 16)
    high = (packed[:, 8:].reshape(n, 1, 4) >> np.array([0, 2, 4, 6], dtype=_U8).reshape(1, 4, 1)).reshape(n, 16)
    scales = ((low & _U8(0x0F)) | ((high & _U8(0x03)) << _U8(4))).astype(np.int8) - np.int8(32)
    dl = (d * scales.astype(_F32)).reshape(n, 16, 1)
    low_bits = _shifted(qs, 2, 32, (0, 2, 4, 6), 3).reshape(n, 16, 16)
    # A clear hmask bit subtracts 4 from the code; a set bit leaves it as is.
    minus_four = (_shifted(hmask, 1, 32, tuple(range(8)), 1).reshape(n, 16, 16) ^ _U8(1)) << _U8(2)
    q = (low_bits.astype(np.int8) - minus_four.astype(np.int8)).astype(_F32)
    return (dl * q).reshape(n, 256)


def unpack_k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K ``scales[12]`` -> (scales ``[n, 8]``, mins ``[n, 8]``), 6-bit each."""
    n = packed.shape[0]
    d, m, md = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = np.concatenate([d & _U8(0x3F), (md & _U8(0x0F)) | ((d >> _U8(2)) & _U8(0x30))], axis=1)
    mn = np.concatenate([m & _U8(0x3F), (md >> _U8(4)) | ((m >> _U8(2)) & _U8(0x30))], axis=1)
    return sc.reshape(n, 8), mn.reshape(n, 8)


def pack_k_scales(scales: np.ndarray, mins: np.ndarray) -> np.ndarray:
    """Inverse of :func:`unpack_k_scales` for 6-bit values ``[n, 8]`` -> ``[n, 12]``."""
    low = (scales[:, :4] & _U8(0x3F)) | ((scales[:, 4:] & _U8(0x30)) << _U8(2))
    low_m = (mins[:, :4] & _U8(0x3F)) | ((mins[:, 4:] & _U8(0x30)) << _U8(2))
    mixed = (scales[:, 4:] & _U8(0x0F)) | ((mins[:, 4:] & _U8(0x0F)) << _U8(4))
    return np.concatenate([low, low_m, mixed], axis=1)


def _k_affine(d: np.ndarray, dmin: np.ndarray, packed_scales: np.ndarray, q: np.ndarray) -> np.ndarray:
    n = q.shape[0]
    sc, mn = unpack_k_scales(packed_scales)
    dl = (d * sc.astype(_F32)).reshape(n, 8, 1)
    ml = (dmin * mn.astype(_F32)).reshape(n, 8, 1)
    result: np.ndarray = (dl * q.astype(_F32) - ml).reshape(n, 256)
    return result


def decode_q4_k(blocks: np.ndarray) -> np.ndarray:
    q = _shifted(blocks[:, 16:144], 4, 32, (0, 4), 0x0F)
    return _k_affine(_fp16_at(blocks, 0), _fp16_at(blocks, 2), blocks[:, 4:16], q)


def decode_q5_k(blocks: np.ndarray) -> np.ndarray:
    low = _shifted(blocks[:, 48:176], 4, 32, (0, 4), 0x0F)
    high = _shifted(blocks[:, 16:48], 1, 32, tuple(range(8)), 1)
    return _k_affine(_fp16_at(blocks, 0), _fp16_at(blocks, 2), blocks[:, 4:16], low | (high << _U8(4)))


def decode_q6_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    ql, qh = blocks[:, :128], blocks[:, 128:192]
    scales = np.ascontiguousarray(blocks[:, 192:208]).view(np.int8).astype(_F32)
    dl = (_fp16_at(blocks, 208) * scales).reshape(n, 16, 1)
    low = _shifted(ql, 2, 64, (0, 4), 0x0F).reshape(n, 8, 32)
    high = _shifted(qh, 2, 32, (0, 2, 4, 6), 0x03)
    q = ((low | (high << _U8(4))).astype(np.int8) - np.int8(32)).reshape(n, 16, 16).astype(_F32)
    result: np.ndarray = (dl * q).reshape(n, 256)
    return result


def _quantize_sub_blocks_affine(sub: np.ndarray, maxq: int) -> tuple[np.ndarray, ...]:
    """Type-1 sub-blocks ``[n, 8, 32]`` -> (d, dmin fp16 ``[n, 1]``, scales, mins uint8 ``[n, 8]``, codes)."""
    mins = np.maximum(-sub.min(axis=-1), _F32(0))
    scale = (sub.max(axis=-1) + mins) / _F32(maxq)
    base = scale.max(axis=-1, keepdims=True) / _F32(63)
    min_base = mins.max(axis=-1, keepdims=True) / _F32(63)
    with np.errstate(divide="ignore", invalid="ignore"):
        q_scales = np.where(base > 0, np.rint(scale / base), _F32(0)).clip(0, 63).astype(_U8)
        q_mins = np.where(min_base > 0, np.rint(mins / min_base), _F32(0)).clip(0, 63).astype(_U8)
        step = (base * q_scales.astype(_F32))[..., None]
        shifted = sub + (min_base * q_mins.astype(_F32))[..., None]
        codes = np.where(step > 0, np.rint(shifted / step), _F32(0)).clip(0, maxq).astype(_U8)
    return base.astype(np.float16), min_base.astype(np.float16), q_scales, q_mins, codes


def _fp16_bytes(values: np.ndarray) -> np.ndarray:
    return values.view(_U8).reshape(-1, 2)


def encode_q4_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d, dmin, sc, mn, q = _quantize_sub_blocks_affine(blocks.reshape(n, 8, 32), 15)
    pairs = q.reshape(n, 4, 2, 32)
    qs = (pairs[:, :, 0, :] | (pairs[:, :, 1, :] << _U8(4))).reshape(n, 128)
    return np.concatenate([_fp16_bytes(d), _fp16_bytes(dmin), pack_k_scales(sc, mn), qs], axis=1)


def encode_q5_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    d, dmin, sc, mn, q = _quantize_sub_blocks_affine(blocks.reshape(n, 8, 32), 31)
    pairs = q.reshape(n, 4, 2, 32) & _U8(0x0F)
    qs = (pairs[:, :, 0, :] | (pairs[:, :, 1, :] << _U8(4))).reshape(n, 128)
    high = ((q >> _U8(4)) & _U8(1)).astype(np.uint16) << np.arange(8, dtype=np.uint16).reshape(1, 8, 1)
    qh = high.sum(axis=1, dtype=np.uint16).astype(_U8)
    return np.concatenate([_fp16_bytes(d), _fp16_bytes(dmin), pack_k_scales(sc, mn), qh, qs], axis=1)


def encode_q6_k(blocks: np.ndarray) -> np.ndarray:
    n = blocks.shape[0]
    sub = blocks.reshape(n, 16, 16)
    scale = np.abs(sub).max(axis=-1) / _F32(31)
    base = scale.max(axis=-1, keepdims=True) / _F32(127)
    with np.errstate(divide="ignore", invalid="ignore"):
        q_scales = np.where(base > 0, np.rint(scale / base), _F32(0)).clip(0, 127).astype(np.int8)
        step = (base * q_scales.astype(_F32))[..., None]
        q = np.where(step > 0, np.rint(sub / step), _F32(0)).clip(-32, 31).astype(np.int8)
    raw = (q.astype(np.int16) + 32).astype(_U8).reshape(n, 2, 4, 32)
    ql = np.concatenate(
        [
            raw[:, :, 0, :] & _U8(0x0F) | (raw[:, :, 2, :] & _U8(0x0F)) << _U8(4),
            raw[:, :, 1, :] & _U8(0x0F) | (raw[:, :, 3, :] & _U8(0x0F)) << _U8(4),
        ],
        axis=2,
    ).reshape(n, 128)
    top = (raw >> _U8(4)) & _U8(0x03)
    qh = top[:, :, 0, :] | top[:, :, 1, :] << _U8(2) | top[:, :, 2, :] << _U8(4) | top[:, :, 3, :] << _U8(6)
    d = base.astype(np.float16)
    return np.concatenate([ql, qh.reshape(n, 64), q_scales.view(_U8), _fp16_bytes(d)], axis=1)
