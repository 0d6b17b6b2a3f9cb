"""Definitions discovered from tiny models: groups, previous ops, norm offsets, experts, named errors."""

from __future__ import annotations

import pytest
import torch
from qhf.architectures import definition_for, overridden_model_types
from qhf.source.skeleton import meta_skeleton
from tiny_models import tiny_config

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma3_text", "phi3"]
LLAMA_GROUPS = [
    (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), "input_layernorm", "self_attn"),
    (("self_attn.o_proj",), None, None),
    (("mlp.gate_proj", "mlp.up_proj"), "post_attention_layernorm", "mlp"),
    (("mlp.down_proj",), "mlp.up_proj", None),
]


def _definition(model_type: str, **overrides):
    config = tiny_config(model_type, **overrides)
    return definition_for(meta_skeleton(config), config).definition


def test_overrides_cover_the_hand_written_families() -> None:
    assert set(FAMILIES) == set(overridden_model_types())


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "qwen3"])
def test_llama_like_definitions_equal_the_former_catalog(model_type: str) -> None:
    definition = _definition(model_type)
    assert [(g.modules, g.prev_op, g.inspect) for g in definition.groups] == LLAMA_GROUPS
    assert [g.shared_input for g in definition.groups] == [True, False, True, False]
    assert {"input_layernorm", "post_attention_layernorm"} <= set(definition.unquantized)
    assert definition.awq_no_clip == ("self_attn.q_proj", "self_attn.k_proj")
    assert definition.norm_weight_offset == 0.0 and definition.name == model_type


def test_grouped_query_attention_drops_o_proj_scaling() -> None:
    gqa = _definition("llama", num_key_value_heads=2)
    mha = _definition("llama", num_key_value_heads=4)
    assert [g.prev_op for g in gqa.groups if g.modules == ("self_attn.o_proj",)] == [None]
    assert [g.prev_op for g in mha.groups if g.modules == ("self_attn.o_proj",)] == ["self_attn.v_proj"]


def test_gemma_norm_offset_is_probed_and_mlp_reads_the_pre_feedforward_norm() -> None:
    definition = _definition("gemma3_text")
    assert definition.norm_weight_offset == 1.0
    assert definition.groups[2].prev_op == "pre_feedforward_layernorm"


def test_phi3_fused_projections() -> None:
    definition = _definition("phi3")
    assert [g.modules for g in definition.groups] == [
        ("self_attn.qkv_proj",),
        ("self_attn.o_proj",),
        ("mlp.gate_up_proj",),
        ("mlp.down_proj",),
    ]
    assert [g.prev_op for g in definition.groups] == ["input_layernorm", None, "post_attention_layernorm", None]
    assert "self_attn.qkv_proj" in definition.awq_no_clip


def test_moe_experts_are_found_by_structure_and_routers_stay_dense() -> None:
    config = tiny_config("qwen2_moe", num_experts=8, num_experts_per_tok=1, shared_expert_intermediate_size=64)
    found = definition_for(meta_skeleton(config), config)
    modules = [g.modules for g in found.definition.groups]
    assert ("mlp.experts.#.gate_proj", "mlp.experts.#.up_proj") in modules
    assert ("mlp.experts.#.down_proj",) in modules
    left = next(iter(found.structures.values())).left_dense
    assert "mlp.shared_expert_gate" in left


def test_llama4_batched_experts_are_unfused_and_its_router_stays_dense() -> None:
    """Llama 4's experts take every expert's rows stacked (``[E*T, H]``, no routing arguments): they are unfused
    into per-expert linears (checked against the fused forward in discovery) and the router
    (an ``nn.Linear`` subclass returning scores and logits) is left dense."""
    from qhf.architectures.fused_experts import UnfusedBatchedExperts

    config = tiny_config("llama4_text", num_local_experts=4, num_experts_per_tok=1, intermediate_size_mlp=128)
    model = meta_skeleton(config)
    assert isinstance(model.get_submodule("model.layers.0.feed_forward.experts"), UnfusedBatchedExperts)
    found = definition_for(model, config)
    modules = [g.modules for g in found.definition.groups]
    assert ("feed_forward.experts.#.gate_proj", "feed_forward.experts.#.up_proj") in modules
    assert ("feed_forward.experts.#.down_proj",) in modules
    assert "feed_forward.router" in next(iter(found.structures.values())).left_dense


def test_parallel_attention_shares_one_group() -> None:
    groups = [g.modules for g in _definition("falcon").groups]
    assert ("self_attention.query_key_value", "mlp.dense_h_to_4h") in groups


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("model_type", ["llama", "gemma3_text"])
def test_norms_of_a_half_precision_model_are_found_as_in_float32(model_type: str, dtype: str) -> None:
    """A bfloat16 norm's product ``f(x) * weight`` is rounded to 8 significant bits; the probe runs on a float32
    copy, so the groups keep their norms (bfloat16 models lost them, and AWQ left those groups unscaled)."""
    config = tiny_config(model_type)
    skeleton = meta_skeleton(config, dtype=getattr(torch, dtype))
    assert next(iter(skeleton.parameters())).dtype == getattr(torch, dtype)
    half = definition_for(skeleton, config).definition
    full = _definition(model_type)
    assert [(g.modules, g.prev_op) for g in half.groups] == [(g.modules, g.prev_op) for g in full.groups]
    assert half.norm_weight_offset == full.norm_weight_offset
    assert sum(g.prev_op is not None for g in half.groups) >= 2
