"""Hugging Face names -> llama.cpp tensor names through an architecture record, and llama.cpp's q/k row order.

The inverse of the record's reading rules: :func:`writing_rule` finds the rule that reads a Hugging Face
parameter (``model.layers.N.self_attn.q_proj.weight`` -> the layer rule ``attn_q.weight``) and
:func:`gguf_names` gives the llama.cpp names it is stored under (two for fused MoE experts);
:func:`permute_qk` interleaves the rotary halves of each head's rows the way llama.cpp's converter does for
llama, so that ``unpermute_qk(permute_qk(w, h), h) == w``. The permutation moves whole rows, so it applies
equally to a dense ``[rows, in]`` weight and to GGUF block bytes ``[rows, row_bytes]``.
"""

from __future__ import annotations

import re

import numpy as np

from .architecture import GGUFArchitecture, TensorRule
from .architecture_table import architecture_record
from .errors import GGUFFileError

LLAMA = architecture_record("llama")
_LAYER = re.compile(r"^(.+)\.(\d+)\.(.+)$")


def writing_rule(hf: str, record: GGUFArchitecture = LLAMA) -> tuple[TensorRule, int | None] | None:
    """(the rule reading ``hf``, its layer index or ``None`` for a global tensor), or ``None`` when the record
    has no rule for it."""
    for rule in record.globals:
        if rule.hf == hf:
            return rule, None
    match = _LAYER.match(hf)
    if match is None or match.group(1) != record.layer_prefix:
        return None
    for rule in record.layer:
        if rule.hf == match.group(3):
            return rule, int(match.group(2))
    return None


def gguf_names(rule: TensorRule, layer: int | None) -> tuple[str, ...]:
    """The llama.cpp names of ``rule`` in ``layer`` (``blk.N.`` prefixed) or as a global tensor."""
    return rule.gguf if layer is None else tuple(f"blk.{layer}.{name}" for name in rule.gguf)


def gguf_name(hf: str, record: GGUFArchitecture = LLAMA) -> str | None:
    """The llama.cpp name of a single-source Hugging Face parameter, or ``None`` when the record has none."""
    found = writing_rule(hf, record)
    if found is None or len(found[0].gguf) != 1:
        return None
    return gguf_names(*found)[0]


def permute_qk(rows: np.ndarray, heads: int, *, name: str = "q/k projection") -> np.ndarray:
    """llama.cpp's rotary row order of a ``[heads * head_dim, ...]`` q/k projection (dense or block bytes)."""
    count = rows.shape[0]
    if heads <= 0 or count % (2 * heads):
        raise GGUFFileError(f"{name}: {count} rows cannot be split into {heads} heads of even size")
    half = count // heads // 2
    return np.ascontiguousarray(rows.reshape(heads, 2, half, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape))
