"""Model definitions: chosen from model_type, every named module exists in the real transformers model."""

from __future__ import annotations

import pytest
from qhf.architectures import definition_for, supported_model_types
from qhf.errors import UnsupportedArchitectureError
from qhf.source.skeleton import meta_skeleton
from tiny_models import tiny_config
from torch import nn

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma3_text", "phi3"]


def test_supported_types_cover_the_issue() -> None:
    assert set(FAMILIES) <= set(supported_model_types())


@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_named_module_exists(model_type: str) -> None:
    config = tiny_config(model_type)
    definition = definition_for(config)
    model = meta_skeleton(config)
    layers = model.get_submodule(definition.layers_path)
    assert isinstance(layers, nn.ModuleList) and len(layers) == config.num_hidden_layers
    layer = layers[0]
    for name in definition.quantized_modules:
        assert isinstance(layer.get_submodule(name), nn.Linear), name
    for group in definition.groups:
        if group.prev_op is not None:
            layer.get_submodule(group.prev_op)
    for name in definition.run_only:
        layer.get_submodule(name)
    for name in definition.base_modules:
        model.get_submodule(name)
    assert isinstance(model.get_submodule(definition.lm_head), nn.Linear)
    # every linear of the layer is quantized exactly once
    linears = sorted(n for n, m in layer.named_modules() if isinstance(m, nn.Linear))
    assert sorted(definition.quantized_modules) == linears


@pytest.mark.parametrize("model_type", FAMILIES)
def test_awq_previous_op_widths_match(model_type: str) -> None:
    """A group's previous op produces exactly the group's input width (else scaling would be wrong)."""
    config = tiny_config(model_type)
    definition = definition_for(config)
    layer = meta_skeleton(config).get_submodule(definition.layers_path)[0]
    for group in definition.groups:
        if group.prev_op is None:
            continue
        prev = layer.get_submodule(group.prev_op)
        width = prev.out_features if isinstance(prev, nn.Linear) else prev.weight.shape[0]
        for name in group.modules:
            assert layer.get_submodule(name).in_features == width, (group.prev_op, name)


def test_grouped_query_attention_drops_o_proj_scaling() -> None:
    gqa = definition_for(tiny_config("llama", num_key_value_heads=2))
    mha = definition_for(tiny_config("llama", num_key_value_heads=4))
    assert [g.prev_op for g in gqa.groups if g.modules == ("self_attn.o_proj",)] == [None]
    assert [g.prev_op for g in mha.groups if g.modules == ("self_attn.o_proj",)] == ["self_attn.v_proj"]


def test_gemma_norms_have_unit_offset() -> None:
    assert definition_for(tiny_config("gemma3_text")).norm_weight_offset == 1.0
    assert definition_for(tiny_config("llama")).norm_weight_offset == 0.0


def test_unsupported_architecture_lists_supported_types() -> None:
    config = type("C", (), {"model_type": "gpt_neox"})()
    with pytest.raises(UnsupportedArchitectureError) as info:
        definition_for(config)
    message = str(info.value)
    assert "'gpt_neox'" in message
    for name in FAMILIES:
        assert name in message
    assert isinstance(info.value, ValueError)


def test_multimodal_gemma3_gets_a_hint() -> None:
    with pytest.raises(UnsupportedArchitectureError, match="gemma3_text"):
        definition_for(type("C", (), {"model_type": "gemma3"})())
