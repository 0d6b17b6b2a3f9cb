"""The llama record's names as plain lookups (the writer's inverse map reads them) and its q/k rotary order.

Tensor names (``N`` = layer index)::

    token_embd.weight          -> model.embed_tokens.weight
    output_norm.weight         -> model.norm.weight
    output.weight              -> lm_head.weight            (absent when embeddings are tied)
    blk.N.attn_norm.weight     -> model.layers.N.input_layernorm.weight
    blk.N.ffn_norm.weight      -> model.layers.N.post_attention_layernorm.weight
    blk.N.attn_{q,k,v}.weight  -> model.layers.N.self_attn.{q,k,v}_proj.weight
    blk.N.attn_output.weight   -> model.layers.N.self_attn.o_proj.weight
    blk.N.ffn_{gate,up,down}.weight -> model.layers.N.mlp.{gate,up,down}_proj.weight

They are the ``llama`` record of :mod:`.architecture_table` (the one source); llama.cpp's converter permutes the
rows of the query and key projections, which :func:`unpermute_qk` undoes.
"""

from __future__ import annotations

import re

from .architecture_table import architecture_record
from .tensor_conversions import unpermute_qk

_RECORD = architecture_record("llama")
_GLOBAL = {rule.gguf[0]: rule.hf for rule in _RECORD.globals}
_LAYER = {rule.gguf[0]: rule.hf for rule in _RECORD.layer}
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")

__all__ = ["hf_name", "unpermute_qk"]


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face parameter name of a llama .gguf tensor, or ``None`` when it has none
    (e.g. ``rope_freqs.weight``, which transformers recomputes)."""
    if gguf_name in _GLOBAL:
        return _GLOBAL[gguf_name]
    match = _BLOCK.match(gguf_name)
    if match and match.group(2) in _LAYER:
        return f"{_RECORD.layer_prefix}.{match.group(1)}.{_LAYER[match.group(2)]}"
    return None
