"""Map a llama-architecture .gguf onto Hugging Face names and a Hugging Face style config dict.

Tensor names (``N`` = layer index)::

    token_embd.weight          -> model.embed_tokens.weight
    output_norm.weight         -> model.norm.weight
    output.weight              -> lm_head.weight            (absent when embeddings are tied)
    blk.N.attn_norm.weight     -> model.layers.N.input_layernorm.weight
    blk.N.ffn_norm.weight      -> model.layers.N.post_attention_layernorm.weight
    blk.N.attn_{q,k,v}.weight  -> model.layers.N.self_attn.{q,k,v}_proj.weight
    blk.N.attn_output.weight   -> model.layers.N.self_attn.o_proj.weight
    blk.N.ffn_{gate,up,down}.weight -> model.layers.N.mlp.{gate,up,down}_proj.weight

llama.cpp's converter permutes the rows of the query and key projections (rotary halves interleaved
per head); :func:`unpermute_qk` undoes that so the dense weights equal the Hugging Face ones. The
config dict uses the keys of ``transformers.LlamaConfig`` without importing transformers.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .errors import GGUFFileError

_GLOBAL = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_BLOCK = re.compile(r"^blk\.(\d+)\.(.+)$")

# (gguf metadata key under the architecture prefix, config key)
_CONFIG_KEYS = (
    ("context_length", "max_position_embeddings"),
    ("block_count", "num_hidden_layers"),
    ("feed_forward_length", "intermediate_size"),
    ("embedding_length", "hidden_size"),
    ("rope.dimension_count", "head_dim"),
    ("rope.freq_base", "rope_theta"),
    ("attention.head_count", "num_attention_heads"),
    ("attention.head_count_kv", "num_key_value_heads"),
    ("attention.layer_norm_rms_epsilon", "rms_norm_eps"),
    ("vocab_size", "vocab_size"),
)
_TOKEN_KEYS = (
    ("tokenizer.ggml.bos_token_id", "bos_token_id"),
    ("tokenizer.ggml.eos_token_id", "eos_token_id"),
    ("tokenizer.ggml.unknown_token_id", "unk_token_id"),
    ("tokenizer.ggml.padding_token_id", "pad_token_id"),
)


def hf_name(gguf_name: str) -> str | None:
    """The Hugging Face parameter name of a llama .gguf tensor, or ``None`` when it has none
    (e.g. ``rope_freqs.weight``, which transformers recomputes)."""
    if gguf_name in _GLOBAL:
        return _GLOBAL[gguf_name]
    match = _BLOCK.match(gguf_name)
    if match and match.group(2) in _LAYER:
        return f"model.layers.{match.group(1)}.{_LAYER[match.group(2)]}"
    return None


def unpermute_qk(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undo llama.cpp's rotary row permutation of a ``[heads * head_dim, in]`` q/k projection."""
    rows = weight.shape[0]
    if heads <= 0 or rows % (2 * heads):
        raise GGUFFileError(f"q/k projection with {rows} rows cannot be split into {heads} heads of even size")
    half = rows // heads // 2
    return weight.reshape(heads, half, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def hf_config(metadata: dict[str, Any], tensor_names: list[str]) -> dict[str, Any]:
    """A ``LlamaConfig``-style dict from plain metadata values (``GGUFReader.value``) and tensor names."""
    arch = metadata.get("general.architecture")
    if arch != "llama":
        raise GGUFFileError(f"general.architecture: expected 'llama', found {arch!r}")
    config: dict[str, Any] = {"model_type": "llama", "architectures": ["LlamaForCausalLM"]}
    for key, target in _CONFIG_KEYS:
        if f"llama.{key}" in metadata:
            config[target] = metadata[f"llama.{key}"]
    for key, target in _TOKEN_KEYS:
        if key in metadata:
            config[target] = metadata[key]
    if "vocab_size" not in config and isinstance(metadata.get("tokenizer.ggml.tokens"), list):
        config["vocab_size"] = len(metadata["tokenizer.ggml.tokens"])
    config["tie_word_embeddings"] = "output.weight" not in tensor_names
    required = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    missing = [k for k in required if k not in config]
    if missing:
        raise GGUFFileError(f"llama metadata lacks the keys behind {', '.join(missing)}")
    config.setdefault("num_key_value_heads", config["num_attention_heads"])
    return config
