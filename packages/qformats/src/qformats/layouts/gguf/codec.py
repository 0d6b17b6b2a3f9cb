"""Row-wise GGUF encoding and decoding of whole matrices.

``encode_rows(weight [rows, in], qtype)`` pads ``in`` with zeros up to a whole number of blocks and
returns uint8 ``[rows, row_bytes]`` (the reference's GGUF-family ``qweight``); ``decode_rows`` is its
inverse up to quantization and returns float32 ``[rows, in]``. Plain element types (F32, F16, BF16)
decode too, so a native .gguf tensor of any supported type can be read through one function.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import LayoutError, UnsupportedLayoutError
from . import codecs_kquant as kq
from . import codecs_legacy as lg
from . import codecs_lowbit as lb
from .types import GGMLType, ggml_type

Codec = Callable[[np.ndarray], np.ndarray]

DECODERS: dict[str, Codec] = {
    "Q4_0": lg.decode_q4_0,
    "Q4_1": lg.decode_q4_1,
    "Q5_0": lg.decode_q5_0,
    "Q5_1": lg.decode_q5_1,
    "Q8_0": lg.decode_q8_0,
    "Q2_K": kq.decode_q2_k,
    "Q3_K": kq.decode_q3_k,
    "Q4_K": kq.decode_q4_k,
    "Q5_K": kq.decode_q5_k,
    "Q6_K": kq.decode_q6_k,
    "Q1_0": lb.decode_q1_0,
    "Q2_0": lb.decode_q2_0,
}

ENCODERS: dict[str, Codec] = {
    "Q4_0": lg.encode_q4_0,
    "Q4_1": lg.encode_q4_1,
    "Q5_0": lg.encode_q5_0,
    "Q5_1": lg.encode_q5_1,
    "Q8_0": lg.encode_q8_0,
    "Q4_K": kq.encode_q4_k,
    "Q5_K": kq.encode_q5_k,
    "Q6_K": kq.encode_q6_k,
    "Q1_0": lb.encode_q1_0,
}


def encodable_types() -> tuple[str, ...]:
    """Names of the block types :func:`encode_rows` can write."""
    return tuple(ENCODERS)


def encode_rows(weight: np.ndarray, qtype: str | int, *, name: str = "weight") -> np.ndarray:
    """float ``[rows, in]`` -> uint8 ``[rows, ceil(in / B) * T]``; non-finite values are refused."""
    t = ggml_type(qtype)
    encoder = ENCODERS.get(t.name)
    if encoder is None:
        raise UnsupportedLayoutError(
            f"{name}: GGUF encoding to {t.name} is not supported; encodable: {', '.join(ENCODERS)}"
        )
    if weight.ndim != 2:
        raise LayoutError(f"{name}: expected a 2-D [rows, in] matrix, found shape {weight.shape}")
    values = np.asarray(weight, dtype=np.float32)
    if not np.isfinite(values).all():
        bad = int((~np.isfinite(values)).sum())
        raise LayoutError(f"{name}: expected finite values for {t.name}, found {bad} inf/nan")
    rows, cols = values.shape
    padded = t.padded(cols)
    if padded != cols:
        values = np.pad(values, ((0, 0), (0, padded - cols)))
    blocks = np.ascontiguousarray(values).reshape(-1, t.block_size)
    # Blocks whose scale underflows (all-denormal input) divide by a zero fp16 scale exactly as ggml
    # does; the stored scale is 0 so they decode to zeros. Silence the float warnings of that path.
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        return encoder(blocks).reshape(rows, t.row_bytes(padded))


def decode_blocks(data: np.ndarray, t: GGMLType) -> np.ndarray:
    """Flat uint8 bytes of whole blocks -> flat float32 values (``len // T * B`` of them)."""
    raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    if raw.size % t.type_size:
        raise LayoutError(f"{t.name}: expected a multiple of {t.type_size} bytes, found {raw.size}")
    if t.name == "F32":
        return raw.view(np.float32).copy()
    if t.name == "F16":
        return raw.view(np.float16).astype(np.float32)
    if t.name == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
    decoder = DECODERS.get(t.name)
    if decoder is None:
        known = ", ".join(["F32", "F16", "BF16", *DECODERS])
        raise UnsupportedLayoutError(f"GGUF decoding of {t.name} is not supported; decodable: {known}")
    # Scales that are inf/nan in the file decode to inf/nan values, as in ggml; no warning noise.
    with np.errstate(invalid="ignore", over="ignore"):
        return decoder(raw.reshape(-1, t.type_size)).reshape(-1)


def decode_rows(qweight: np.ndarray, qtype: str | int, in_features: int, *, name: str = "qweight") -> np.ndarray:
    """uint8 ``[rows, row_bytes]`` -> float32 ``[rows, in_features]`` (block padding dropped)."""
    t = ggml_type(qtype)
    if qweight.ndim != 2 or qweight.dtype != np.uint8:
        raise LayoutError(f"{name}: expected 2-D uint8 [rows, row_bytes], found {qweight.dtype} {qweight.shape}")
    expected = t.row_bytes(t.padded(in_features))
    if qweight.shape[1] != expected:
        raise LayoutError(
            f"{name}: expected {expected} bytes per row for {t.name} with in_features={in_features}, "
            f"found {qweight.shape[1]}"
        )
    rows = qweight.shape[0]
    dense = decode_blocks(qweight, t).reshape(rows, t.padded(in_features))
    return dense[:, :in_features] if dense.shape[1] != in_features else dense
