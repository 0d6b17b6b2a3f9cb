"""From llama.cpp's stored form of a tensor to the Hugging Face parameter (numpy, float32).

A :class:`Conversion` takes the decoded source tensors of one Hugging Face parameter (numpy shapes, ggml dims
reversed; most parameters have one source, fused MoE experts two) and the Hugging Face style config dict, and
returns the parameter. :meth:`Conversion.shape` gives the result's shape from the sources' shapes without
decoding anything. Each one undoes what llama.cpp's ``convert_hf_to_gguf.py`` does to that tensor, as
transformers' GGUF loader (``modeling_gguf_pytorch_utils``) undoes it:

* ``rope_q`` / ``rope_k``: llama-style rotary row permutation of q / k (``[heads * head_dim, in]``; heads from
  ``num_attention_heads`` / ``num_key_value_heads``), see :func:`unpermute_qk`.
* ``norm_offset``: Gemma / Nemotron norm weights, stored as ``1 + w`` (the models compute ``x * (1 + w)``),
  returned as ``w`` (``stored - 1`` in float32).
* ``row_vector``: a stored 1-D ``[n]`` that the Hugging Face module holds as ``[1, n]`` (Qwen2-MoE's shared
  expert gate).
* ``gate_up_experts``: the experts' gate ``[E, I, H]`` and up ``[E, I, H]`` stacked into transformers'
  fused ``gate_up_proj [E, 2 * I, H]``, gate first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import GGUFFileError

Shape = tuple[int, ...]


def unpermute_qk(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's rotary row permutation of a ``[heads * head_dim, in]`` q/k projection."""
    rows = weight.shape[0]
    if heads <= 0 or rows % (2 * heads):
        raise GGUFFileError(f"q/k projection with {rows} rows cannot be split into {heads} heads of even size")
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _heads(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise GGUFFileError(f"config {key!r}: expected an integer head count to undo the rotary order, found {value!r}")
    return value


@dataclass(frozen=True)
class Conversion:
    """One stored-to-Hugging-Face rule. ``sources``: how many file tensors it reads."""

    name: str
    sources: int
    apply: Callable[[Sequence[np.ndarray], Mapping[str, Any]], np.ndarray]
    shape: Callable[[Sequence[Shape]], Shape]


def _same(shapes: Sequence[Shape]) -> Shape:
    return shapes[0]


def _stack_shape(shapes: Sequence[Shape]) -> Shape:
    gate, up = shapes
    if len(gate) != 3 or gate != up:
        raise GGUFFileError(f"expert gate {gate} and up {up}: expected two equal [experts, rows, in] shapes")
    return (gate[0], gate[1] + up[1], gate[2])


def _stack(arrays: Sequence[np.ndarray], config: Mapping[str, Any]) -> np.ndarray:
    _stack_shape([a.shape for a in arrays])
    return np.concatenate(list(arrays), axis=1)


IDENTITY = Conversion("identity", 1, lambda a, _c: a[0], _same)
ROPE_Q = Conversion("rope_q", 1, lambda a, c: unpermute_qk(a[0], _heads(c, "num_attention_heads")), _same)
ROPE_K = Conversion("rope_k", 1, lambda a, c: unpermute_qk(a[0], _heads(c, "num_key_value_heads")), _same)
NORM_OFFSET = Conversion("norm_offset", 1, lambda a, _c: a[0] - np.float32(1), _same)
ROW_VECTOR = Conversion("row_vector", 1, lambda a, _c: a[0].reshape(1, -1), lambda s: (1, *s[0]))
GATE_UP_EXPERTS = Conversion("gate_up_experts", 2, _stack, _stack_shape)
