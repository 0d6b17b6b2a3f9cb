"""Gemma 2 / 3's attention scale as llama.cpp computes it, as the config field transformers uses.

llama.cpp's gemma2 / gemma3 graphs scale queries by ``1 / sqrt(head_dim)``, except the 27B models (keyed on
their layer count: 46 for Gemma 2, 62 for Gemma 3), which use ``1 / sqrt(hidden_size / heads)``; nothing in
the file says which. Transformers' config holds the scale as ``query_pre_attn_scalar`` and its GGUF loader leaves
it at the class default 256, right only where the head size is 256. :func:`gemma_attention_scale` sets it by
llama.cpp's rule, so a file runs with the scale llama.cpp gives it; the writer refuses a config whose scale
llama.cpp would not compute (:func:`llama_cpp_query_scalar`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .architecture import ConfigRule

if TYPE_CHECKING:
    from .reader import GGUFReader


def llama_cpp_query_scalar(config: Mapping[str, Any], layers_27b: int) -> tuple[str, int]:
    """(what it is, the value) of the ``query_pre_attn_scalar`` llama.cpp's graph uses for ``config``."""
    hidden, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    if int(config["num_hidden_layers"]) == layers_27b:
        return f"hidden_size / num_attention_heads ({layers_27b}-layer 27B)", hidden // heads
    return "head_dim", int(config.get("head_dim") or hidden // heads)


def gemma_attention_scale(layers_27b: int) -> ConfigRule:
    """The config rule for a Gemma architecture whose 27B model has ``layers_27b`` layers."""

    def rule(config: dict[str, Any], _reader: GGUFReader) -> None:
        config["query_pre_attn_scalar"] = llama_cpp_query_scalar(config, layers_27b)[1]

    return rule
