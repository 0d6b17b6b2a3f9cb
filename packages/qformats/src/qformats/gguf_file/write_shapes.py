"""The numpy shape of every Hugging Face parameter a record's model holds, from the config (the writer checks each
tensor it is given against it).

Shapes are written with the config's dimensions: ``H`` hidden size, ``Q`` = heads * head_dim, ``K`` = kv heads *
head_dim, ``D`` head_dim, ``I`` intermediate size, ``V`` vocabulary, ``E`` experts, ``M`` an expert's
intermediate size, ``S`` the shared expert's. Which parameters are expected: every rule of the record, less
``lm_head`` when the embeddings are tied and the tensors a :class:`~.architecture.TensorFlag` says are absent
(StableLM's q/k/v biases, its ``ffn_norm`` with a parallel residual).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .architecture import GGUFArchitecture
from .errors import GGUFFileError
from .write_metadata import config_value, head_dim

GLOBAL_SHAPES = {"model.embed_tokens.weight": "VH", "model.norm.weight": "H", "model.norm.bias": "H",
                 "lm_head.weight": "VH"}  # fmt: skip
LAYER_SHAPES = {
    "input_layernorm.weight": "H", "input_layernorm.bias": "H", "post_attention_layernorm.weight": "H",
    "post_attention_layernorm.bias": "H", "pre_feedforward_layernorm.weight": "H",
    "post_feedforward_layernorm.weight": "H",
    "self_attn.q_proj.weight": "QH", "self_attn.k_proj.weight": "KH", "self_attn.v_proj.weight": "KH",
    "self_attn.o_proj.weight": "HQ", "self_attn.q_proj.bias": "Q", "self_attn.k_proj.bias": "K",
    "self_attn.v_proj.bias": "K", "self_attn.o_proj.bias": "H", "self_attn.q_norm.weight": "D",
    "self_attn.k_norm.weight": "D", "self_attn.qkv_proj.weight": "FH",
    "mlp.gate_proj.weight": "IH", "mlp.up_proj.weight": "IH", "mlp.down_proj.weight": "HI",
    "mlp.gate_up_proj.weight": "GH", "mlp.c_fc.weight": "IH", "mlp.c_fc.bias": "I", "mlp.c_proj.weight": "HI",
    "mlp.c_proj.bias": "H", "mlp.gate.weight": "EH", "mlp.experts.gate_up_proj": "ENH", "mlp.experts.down_proj": "EHM",
    "mlp.shared_expert_gate.weight": "1H", "mlp.shared_expert.gate_proj.weight": "SH",
    "mlp.shared_expert.up_proj.weight": "SH", "mlp.shared_expert.down_proj.weight": "HS",
}  # fmt: skip


def _dims(config: Mapping[str, Any]) -> dict[str, int]:
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    d = head_dim(config)
    inter = int(config["intermediate_size"])
    experts = {"E": int(config_value(config, "num_experts") or 0), "M": int(config.get("moe_intermediate_size") or 0),
               "S": int(config.get("shared_expert_intermediate_size") or 0)}  # fmt: skip
    return {"H": int(config["hidden_size"]), "Q": heads * d, "K": kv * d, "D": d, "I": inter, "G": 2 * inter,
            "V": int(config["vocab_size"]), "F": (heads + 2 * kv) * d, "N": 2 * experts["M"], "1": 1,
            **experts}  # fmt: skip


def _absent(config: Mapping[str, Any], record: GGUFArchitecture) -> set[str]:
    """llama.cpp names (local) of the tensors the record's flags say this config lacks."""
    absent: set[str] = set()
    for flag in record.flags:
        if bool(config.get(flag.field)) is not flag.when_present:
            absent.update((flag.tensor, *flag.also))
    return absent


def expected_shapes(config: Mapping[str, Any], record: GGUFArchitecture) -> dict[str, tuple[int, ...]]:
    """Hugging Face name -> numpy shape of every parameter a ``record`` model of ``config`` holds (``lm_head``
    only when untied)."""
    try:
        dims = _dims(config)
    except (KeyError, TypeError, ValueError) as exc:
        raise GGUFFileError(f"config: {exc!r}: a {record.key} .gguf needs integer dimensions") from None
    shapes: dict[str, tuple[int, ...]] = {}
    for rule in record.globals:
        if rule.hf == "lm_head.weight" and config.get("tie_word_embeddings", False):
            continue
        shapes[rule.hf] = tuple(dims[c] for c in GLOBAL_SHAPES[rule.hf])
    absent = _absent(config, record)
    layer_rules = [rule for rule in record.layer if not absent.intersection(rule.gguf)]
    for layer in range(int(config["num_hidden_layers"])):
        for rule in layer_rules:
            shapes[f"{record.layer_prefix}.{layer}.{rule.hf}"] = tuple(dims[c] for c in LAYER_SHAPES[rule.hf])
    return shapes
