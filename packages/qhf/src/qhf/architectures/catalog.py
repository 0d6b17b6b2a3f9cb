"""The supported architectures, chosen from ``config.model_type``.

Each entry is plain data (:class:`~qhf.architectures.definition.ArchitectureDefinition`). Module paths
follow the transformers implementations of each family; a test builds a tiny model of every family
and checks that each named module exists and that every quantized one is an ``nn.Linear``.
"""

from __future__ import annotations

from typing import Any

from ..errors import UnsupportedArchitectureError
from .definition import ArchitectureDefinition, CalcGroup

_ATTN_QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
_MLP_GATE_UP = ("mlp.gate_proj", "mlp.up_proj")
_BASE = ("model.embed_tokens", "model.rotary_emb", "model.norm")


def _llama_like(name: str, model_types: tuple[str, ...]) -> ArchitectureDefinition:
    """Llama, Mistral, Qwen2 and Qwen3 share one layer shape (Qwen3 adds q/k norms inside attention)."""
    return ArchitectureDefinition(
        name=name,
        model_types=model_types,
        layers_path="model.layers",
        groups=(
            CalcGroup(_ATTN_QKV, prev_op="input_layernorm", shared_input=True, inspect="self_attn"),
            CalcGroup(("self_attn.o_proj",), prev_op="self_attn.v_proj"),
            CalcGroup(_MLP_GATE_UP, prev_op="post_attention_layernorm", shared_input=True, inspect="mlp"),
            CalcGroup(("mlp.down_proj",), prev_op="mlp.up_proj"),
        ),
        run_only=("input_layernorm", "post_attention_layernorm"),
        base_modules=_BASE,
    )


LLAMA = _llama_like("llama", ("llama",))
MISTRAL = _llama_like("mistral", ("mistral",))
QWEN2 = _llama_like("qwen2", ("qwen2",))
QWEN3 = _llama_like("qwen3", ("qwen3",))

# Gemma 3 (text): four norms per layer; the MLP reads pre_feedforward_layernorm's output and the
# norms multiply by (1 + weight).
GEMMA3 = ArchitectureDefinition(
    name="gemma3",
    model_types=("gemma3_text",),
    layers_path="model.layers",
    groups=(
        CalcGroup(_ATTN_QKV, prev_op="input_layernorm", shared_input=True, inspect="self_attn"),
        CalcGroup(("self_attn.o_proj",), prev_op="self_attn.v_proj"),
        CalcGroup(_MLP_GATE_UP, prev_op="pre_feedforward_layernorm", shared_input=True, inspect="mlp"),
        CalcGroup(("mlp.down_proj",), prev_op="mlp.up_proj"),
    ),
    run_only=("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"),
    base_modules=("model.embed_tokens", "model.rotary_emb", "model.norm"),
    norm_weight_offset=1.0,
)

# Phi-3: fused qkv_proj and gate_up_proj. o_proj's input is only the value part of qkv_proj and
# down_proj's input is act(gate) * up, so neither group has a previous op AWQ could scale.
PHI3 = ArchitectureDefinition(
    name="phi3",
    model_types=("phi3",),
    layers_path="model.layers",
    groups=(
        CalcGroup(("self_attn.qkv_proj",), prev_op="input_layernorm", inspect="self_attn"),
        CalcGroup(("self_attn.o_proj",), prev_op=None),
        CalcGroup(("mlp.gate_up_proj",), prev_op="post_attention_layernorm", inspect="mlp"),
        CalcGroup(("mlp.down_proj",), prev_op=None),
    ),
    run_only=("input_layernorm", "post_attention_layernorm"),
    base_modules=_BASE,
    awq_no_clip=("self_attn.qkv_proj",),
)

DEFINITIONS: tuple[ArchitectureDefinition, ...] = (LLAMA, MISTRAL, QWEN2, QWEN3, GEMMA3, PHI3)
_BY_TYPE: dict[str, ArchitectureDefinition] = {t: d for d in DEFINITIONS for t in d.model_types}

_HINTS = {
    "gemma3": "the multimodal gemma3 wrapper is not supported; quantize its text model (model_type 'gemma3_text')",
}


def supported_model_types() -> tuple[str, ...]:
    """Every ``config.model_type`` value with a definition, sorted."""
    return tuple(sorted(_BY_TYPE))


def definition_for(config: Any) -> ArchitectureDefinition:
    """The definition for ``config.model_type``, adjusted to the config's shapes.

    Under grouped-query attention (``num_key_value_heads != num_attention_heads``) ``v_proj``'s output
    is narrower than ``o_proj``'s input, so the ``o_proj`` group gets no previous op.
    Raises :class:`UnsupportedArchitectureError` listing the supported types.
    """
    model_type = getattr(config, "model_type", None)
    definition = _BY_TYPE.get(str(model_type))
    if definition is None:
        hint = _HINTS.get(str(model_type))
        supported = ", ".join(supported_model_types())
        raise UnsupportedArchitectureError(
            f"config.model_type {model_type!r} is not supported"
            + (f" ({hint})" if hint else "")
            + f"; supported model types: {supported}"
        )
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or (config.hidden_size // heads if heads else None)
    for first in definition.shape_dependent_prev:
        if any(g.modules[0] == first and g.prev_op for g in definition.groups):
            v_width = (kv_heads or 0) * (head_dim or 0)
            o_width = (heads or 0) * (head_dim or 0)
            if v_width != o_width or v_width == 0:
                definition = definition.without_prev(first)
    return definition
