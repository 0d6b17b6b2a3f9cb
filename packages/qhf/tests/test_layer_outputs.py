"""Decoder layers that return tuples or carry outputs into the next layer's call, probed at discovery; RWKV's
in-place weight rescale refused by name."""

from __future__ import annotations

import pytest
import torch
from qhf.architectures import definition_for
from qhf.architectures.layer_outputs import probe_layer_outputs
from qhf.errors import UnsupportedArchitectureError
from qhf.source.skeleton import meta_skeleton
from tiny_models import tiny_config
from torch import nn


def _definition(model_type: str, **overrides):
    config = tiny_config(model_type, **overrides)
    return definition_for(meta_skeleton(config), config).definition


def test_a_layer_returning_a_tensor_has_no_arity() -> None:
    assert _definition("llama").layer_output_arity is None


def test_tuple_returning_layers_are_probed() -> None:
    assert _definition("bamba").layer_output_arity == 2
    assert _definition("rwkv", rescale_every=0).layer_output_arity == 3


def test_rwkv_rescaling_weights_in_place_is_refused_by_name() -> None:
    with pytest.raises(UnsupportedArchitectureError, match=r"rescale_every = 6.*set rescale_every to 0"):
        _definition("rwkv", rescale_every=6)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, hidden: torch.Tensor, carry: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.proj(hidden if carry is None else hidden + carry)
        return out, out.detach() * 2


class _Carrying(nn.Module):
    """Each block's second output is the next block's ``carry`` keyword (like GLM-MoE-DSA's topk indices)."""

    def __init__(self, pass_on: bool) -> None:
        super().__init__()
        self.embed = nn.Embedding(4, 8)
        self.layers = nn.ModuleList([_Block(), _Block()])
        self.pass_on = pass_on

    def get_input_embeddings(self) -> nn.Module:
        return self.embed

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, use_cache: bool) -> torch.Tensor:
        hidden, carry = inputs_embeds, None
        for layer in self.layers:
            hidden, extra = layer(hidden, carry=carry)
            carry = extra if self.pass_on else None
        return hidden


@pytest.mark.parametrize("pass_on", [True, False])
def test_an_output_handed_to_the_next_layer_is_found(pass_on: bool) -> None:
    found = probe_layer_outputs(_Carrying(pass_on), "layers", torch.randn(1, 4, 8))
    assert found.arity == 2
    assert found.carried == ({1: "carry"} if pass_on else {})


def test_glm_moe_dsa_carrying_topk_indices_is_refused_by_name() -> None:
    with pytest.raises(
        UnsupportedArchitectureError, match="output 1 is passed to the next layer as `prev_topk_indices`"
    ):
        _definition(
            "glm_moe_dsa",
            n_routed_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=64,
            kv_lora_rank=32,
            q_lora_rank=32,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=16,
            num_key_value_heads=4,
        )


class _ReadsWeightDtype(nn.Module):
    """Like DeepSeek-V3.2's indexer: casts its input to ``weights_proj.weight.dtype`` before calling it."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.weights_proj = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) + self.weights_proj(x.to(self.weights_proj.weight.dtype)).sum(-1, keepdim=True)


def test_a_weight_read_outside_its_linear_is_traced_and_the_class_restored() -> None:
    from qhf.architectures.layer_trace import trace_layer

    layer = _ReadsWeightDtype()
    with trace_layer(layer) as trace:
        layer(torch.randn(1, 3, 8))
    assert trace.weight_read_outside == {"weights_proj"}
    assert type(layer.weights_proj) is nn.Linear and "_weight_watch" not in layer.weights_proj.__dict__
