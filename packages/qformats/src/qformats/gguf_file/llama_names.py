"""Hugging Face llama names -> llama.cpp tensor names, and llama.cpp's q/k row permutation.

The inverse of :mod:`.llama`: :func:`gguf_name` maps ``model.layers.N.self_attn.q_proj.weight`` to
``blk.N.attn_q.weight`` (and so on for every tensor :func:`.llama.hf_name` knows); :func:`permute_qk`
interleaves the rotary halves of each head's rows the way llama.cpp's converter does, so that
``unpermute_qk(permute_qk(w, h), h) == w``. The permutation moves whole rows, so it applies equally to
a dense ``[rows, in]`` weight and to GGUF block bytes ``[rows, row_bytes]``.
"""

from __future__ import annotations

import re

import numpy as np

from .errors import GGUFFileError
from .llama import _GLOBAL, _LAYER

_TO_GLOBAL = {hf: gguf for gguf, hf in _GLOBAL.items()}
_TO_LAYER = {hf: gguf for gguf, hf in _LAYER.items()}
_HF_LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


def gguf_name(hf: str) -> str | None:
    """The llama.cpp name of a Hugging Face llama parameter, or ``None`` when llama.cpp has none for it."""
    if hf in _TO_GLOBAL:
        return _TO_GLOBAL[hf]
    match = _HF_LAYER.match(hf)
    if match and match.group(2) in _TO_LAYER:
        return f"blk.{match.group(1)}.{_TO_LAYER[match.group(2)]}"
    return None


def permute_qk(rows: np.ndarray, heads: int, *, name: str = "q/k projection") -> np.ndarray:
    """llama.cpp's rotary row order of a ``[heads * head_dim, ...]`` q/k projection (dense or block bytes)."""
    count = rows.shape[0]
    if heads <= 0 or count % (2 * heads):
        raise GGUFFileError(f"{name}: {count} rows cannot be split into {heads} heads of even size")
    half = count // heads // 2
    return np.ascontiguousarray(rows.reshape(heads, 2, half, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape))
