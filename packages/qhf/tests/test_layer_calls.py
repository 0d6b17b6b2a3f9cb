"""A looped model (a decoder layer called twice in one forward) refused by name at discovery; a model whose
layers each run once is left alone and its layer list restored."""

from __future__ import annotations

import pytest
import torch
from qhf.architectures import definition_for
from qhf.architectures.layer_calls import check_layers_run_once
from qhf.errors import UnsupportedArchitectureError
from qhf.source.skeleton import meta_skeleton
from tiny_models import tiny_config
from torch import nn


class _Looped(nn.Module):
    """Three blocks; the middle one runs ``loops`` times (a recurrent-depth model)."""

    def __init__(self, loops: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
        self.loops = loops

    def forward(self, inputs_embeds: torch.Tensor, attention_mask: torch.Tensor, use_cache: bool) -> torch.Tensor:
        hidden = self.layers[0](inputs_embeds)
        for _ in range(self.loops):
            hidden = self.layers[1](hidden)
        return self.layers[2](hidden)


def test_a_layer_called_twice_is_refused_naming_it() -> None:
    model = _Looped(loops=2)
    with pytest.raises(UnsupportedArchitectureError, match=r"layers: decoder layer 1 ran twice in one forward"):
        check_layers_run_once(model, "layers", torch.zeros(1, 4, 8), None)


def test_layers_called_once_pass_and_the_list_is_restored() -> None:
    model = _Looped(loops=1)
    layers = list(model.layers)
    check_layers_run_once(model, "layers", torch.zeros(1, 4, 8), None)
    assert all(a is b for a, b in zip(model.layers, layers, strict=True))
    assert "forward" not in model.layers[1].__dict__  # the stand-in forwards are gone


def test_dory_is_refused_at_discovery() -> None:
    config = tiny_config(
        "dory", num_hidden_layers=6, n_input_layers=2, n_recurrent_layers=2, n_output_layers=2,
        layer_types=["sliding_attention", "mlp"] * 3, head_dim=16, sliding_window=32,
    )  # fmt: skip
    with pytest.raises(UnsupportedArchitectureError, match=r"decoder layer 1 ran twice.*before any work"):
        definition_for(meta_skeleton(config), config)


def test_a_llama_discovers_as_before() -> None:
    config = tiny_config("llama")
    assert definition_for(meta_skeleton(config), config).definition.layers_path == "model.layers"
