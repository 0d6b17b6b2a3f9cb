"""llama.cpp's K-quant mixtures (q4_k_m, q5_k_m, q4_k_s, q5_k_s): per-module ggml types and their dynamic rules."""

from __future__ import annotations

import pytest
from qformats.config.dynamic import DynamicRules
from qformats.errors import ConfigError
from qformats.layouts.gguf import mixture_dynamic, mixture_type, mixture_types, tensor_type
from qformats.layouts.gguf.mixtures import more_bits

V, DOWN, Q, UP = "self_attn.v_proj", "mlp.down_proj", "self_attn.q_proj", "mlp.up_proj"


def test_more_bits_layers_of_a_32_layer_model() -> None:
    # llama.cpp's use_more_bits for 32 layers: the first and last 4, and layers 6, 9, ... 27 between.
    assert [i for i in range(32) if more_bits(i, 32)] == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31]
    assert [i for i in range(2) if more_bits(i, 2)] == [1]


@pytest.mark.parametrize(
    ("mixture", "module", "layer", "expected"),
    [
        ("q4_k_m", V, 0, "Q6_K"),
        ("q4_k_m", V, 4, "Q4_K"),
        ("q4_k_m", DOWN, 31, "Q6_K"),
        ("q4_k_m", DOWN, 7, "Q4_K"),
        ("q4_k_m", Q, 0, "Q4_K"),
        ("q4_k_m", UP, 31, "Q4_K"),
        ("q4_k_m", "self_attn.qkv_proj", 5, "Q5_K"),
        ("q4_k_m", "lm_head", 0, "Q6_K"),
        ("q5_k_m", V, 0, "Q6_K"),
        ("q5_k_m", V, 4, "Q5_K"),
        ("q5_k_m", "self_attn.qkv_proj", 5, "Q6_K"),
        ("q4_k_s", V, 3, "Q5_K"),
        ("q4_k_s", V, 4, "Q4_K"),
        ("q4_k_s", DOWN, 3, "Q5_K"),
        ("q4_k_s", DOWN, 4, "Q4_K"),
        ("q5_k_s", V, 0, "Q5_K"),
        ("q5_k_s", DOWN, 31, "Q5_K"),
    ],
)
def test_mixture_type_follows_llama_cpp(mixture: str, module: str, layer: int, expected: str) -> None:
    assert mixture_type(mixture, f"model.layers.{layer}.{module}", layer, 32) == expected


def test_dynamic_rules_name_exactly_the_upgraded_modules() -> None:
    modules = [(f"model.layers.{i}.{m}", i) for i in range(16) for m in (Q, V, UP, DOWN)]
    types = mixture_types("q4_k_m", modules, 16)
    dynamic = mixture_dynamic("q4_k_m", types)
    upgraded = {name for name, qtype in types.items() if qtype != "Q4_K"}
    assert len(dynamic) == len(upgraded) == 2 * 8  # v_proj and down_proj of layers 0, 1, 4, 7, 10, 13, 14, 15
    rules = DynamicRules.from_mapping(dynamic)
    for name, _ in modules:
        override = rules.override(name)
        stored = tensor_type(override["bits"], override["format"]).name if override else "Q4_K"
        assert stored == types[name], name
    assert rules.override("model.layers.1.self_attn.v_proj_extra") == {}  # anchored: one module per rule
    assert rules.override("model.layers.10.mlp.down_proj") == {"bits": 6, "format": "q_k"}


def test_q5_k_s_records_no_overrides() -> None:
    modules = [(f"model.layers.{i}.{V}", i) for i in range(8)]
    assert mixture_dynamic("q5_k_s", mixture_types("q5_k_s", modules, 8)) == {}


def test_unknown_mixture_and_layer_are_refused() -> None:
    with pytest.raises(ConfigError, match="'q3_k_m' is not a K-quant mixture"):
        mixture_type("q3_k_m", "model.layers.0.mlp.down_proj", 0, 4)
    with pytest.raises(ConfigError, match=r"model\.layers\.4\.mlp\.down_proj: layer 4 is outside the model's 4 layers"):
        mixture_type("q4_k_m", "model.layers.4.mlp.down_proj", 4, 4)
