"""Falcon's fused QKV row order and decoder-layout config fields, between llama.cpp and transformers.

llama.cpp's converter (``conversion/falcon.py``, the "jploski" layout) reorders the fused
``query_key_value`` rows of a Falcon with ``g = num_kv_heads`` KV groups: Hugging Face holds ``g`` groups of
``heads / g`` query heads followed by one key and one value head (``[g, heads / g + 2, head_dim, in]``),
llama.cpp all query heads, then the ``g`` key heads, then the ``g`` value heads. With one group (multi-query,
Falcon-7B) both orders are the same. :data:`FALCON_QKV` undoes the reorder (transformers' loader does not: it
reads only multi-query Falcon files correctly).

Config: a file with ``head_count_kv > 1`` is the "new decoder architecture" (Falcon-40B / 180B / Falcon2-11B):
:func:`falcon_config` sets ``new_decoder_architecture``, ``num_kv_heads`` and ``num_ln_in_parallel_attn``
(2 when the layers hold ``attn_norm_2``: llama.cpp's ``attn_norm`` is then Hugging Face's ``ln_mlp`` and
``attn_norm_2`` its ``ln_attn``; else 1, one ``input_layernorm``). A multi-query file keeps transformers'
reading (``multi_query``, one norm).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import GGUFFileError
from .tensor_conversions import Conversion, Shape

if TYPE_CHECKING:
    from .reader import GGUFReader

TWO_NORMS = "attn_norm_2.weight"


def _int(config: Mapping[str, Any], key: str) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise GGUFFileError(
            f"config {key!r}: expected a positive integer to reorder Falcon's fused QKV, found {value!r}"
        )
    return value


def falcon_qkv_to_hf(weight: np.ndarray, heads: int, groups: int) -> np.ndarray:
    """llama.cpp's ``[heads + 2 * groups) * head_dim, in]`` fused QKV (all q, all k, all v) -> Hugging Face's
    grouped order (per group: its ``heads / groups`` q heads, one k head, one v head)."""
    rows = weight.shape[0]
    if heads % groups or rows % (heads + 2 * groups):
        raise GGUFFileError(f"fused QKV with {rows} rows cannot hold {heads} query heads in {groups} KV groups")
    head_dim = rows // (heads + 2 * groups)
    rest = weight.shape[1:]
    q = weight[: heads * head_dim].reshape(groups, heads // groups, head_dim, *rest)
    k = weight[heads * head_dim : (heads + groups) * head_dim].reshape(groups, 1, head_dim, *rest)
    v = weight[(heads + groups) * head_dim :].reshape(groups, 1, head_dim, *rest)
    return np.concatenate([q, k, v], axis=1).reshape(weight.shape)


def _apply(arrays: Sequence[np.ndarray], config: Mapping[str, Any]) -> np.ndarray:
    groups = int(config.get("num_kv_heads") or 1) if config.get("new_decoder_architecture") else 1
    return falcon_qkv_to_hf(arrays[0], _int(config, "num_attention_heads"), groups)


def _same(shapes: Sequence[Shape]) -> Shape:
    return shapes[0]


FALCON_QKV = Conversion("falcon_qkv", 1, _apply, _same)


def falcon_config(config: dict[str, Any], reader: GGUFReader) -> None:
    """Set Falcon's decoder-layout fields from ``num_key_value_heads`` and the layers' norms (module docstring)."""
    groups = config.get("num_key_value_heads", 1)
    two_norms = any(name.startswith("blk.") and name.endswith("." + TWO_NORMS) for name in reader.tensors)
    if groups == 1 and not two_norms:
        return  # multi-query Falcon-7B, as transformers reads it
    config["new_decoder_architecture"] = True
    config["num_kv_heads"] = groups
    config["num_ln_in_parallel_attn"] = 2 if two_norms else 1
