"""The modules outside the decoder layers that the discovery replica gives real random values.

A model's forward reads weights before its first decoder layer besides the token embedding: learned position
embeddings (GPT-2's ``wpe``, OPT's ``embed_positions``), an embedding layer norm (BLOOM's
``word_embeddings_layernorm``, BERT's ``embeddings.LayerNorm``), token-type embeddings, OPT's ``project_in``.
The skeleton keeps every parameter on meta, so on the replica these get seeded random values too
(:func:`qhf.architectures.discovery.randomize_parameters`: float32 ``N(0, 0.05²)``, 1-D weights near 1).

What is materialized: every meta parameter outside the decoder-layer container, inside the language model
when the model is a vision-language one (:func:`qhf.architectures.multimodal.language_model_path`; its vision
tower is never run by a text-only forward), except the vocabulary-sized ones: the input embedding's and the
output projection's parameters (discovery feeds ``inputs_embeds`` and stops after the last representative
layer, so neither is read) and any other parameter with a dimension of the text config's ``vocab_size``.
Other token tables are materialized when they are smaller than the vocabulary: RoCBert's shape and
pronunciation tables (``shape_vocab_size`` 24858), which its forward reads; also Gemma 3n's per-layer table
(``vocab_size_per_layer_input`` 262144, just under its ``vocab_size``), which it would not need. Cost: the
position tables and norms, ``max_position_embeddings x hidden`` at most per table, and such smaller token tables;
never a ``vocab_size x hidden`` table. (A model whose position table happens to have the vocabulary's length keeps
it on meta, and its discovery forward fails naming the meta tensor.)
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .multimodal import language_model_path, text_config


def vocab_sizes(config: Any) -> set[int]:
    """The text config's ``vocab_size`` (empty when it has none)."""
    text = text_config(config)
    size = getattr(text, "vocab_size", None)
    return {size} if isinstance(size, int) and size > 0 else set()


def outside_parameters(model: nn.Module, layers_path: str, config: Any) -> list[str]:
    """Dotted names of the meta parameters of ``model`` the replica materializes (module docstring), in
    ``named_parameters`` order; a parameter shared by several modules is named once."""
    inside = language_model_path(model)
    vocab = vocab_sizes(config)
    get_in = getattr(model, "get_input_embeddings", None)
    get_out = getattr(model, "get_output_embeddings", None)
    embeddings = [m for m in (get_in() if get_in else None, get_out() if get_out else None) if m is not None]
    skipped = {id(p) for module in embeddings for p in module.parameters()}
    names = []
    for name, param in model.named_parameters():
        if name.startswith(layers_path + "."):
            continue
        if inside is not None and not name.startswith(inside + "."):
            continue
        if param.device.type != "meta" or id(param) in skipped:
            continue
        if vocab.intersection(param.shape):
            continue
        names.append(name)
    return names


def randomize_outside(model: nn.Module, layers_path: str, config: Any, generator: torch.Generator) -> list[str]:
    """Give the parameters of :func:`outside_parameters` seeded random values (float32 ``N(0, 0.05²)``,
    1-D ``weight`` near 1, cast to each parameter's dtype); returns their names."""
    names = outside_parameters(model, layers_path, config)
    chosen = {id(model.get_parameter(full)) for full in names}
    made: dict[int, nn.Parameter] = {}
    for full in names:  # draws in name order, so the values do not depend on module traversal
        param = model.get_parameter(full)
        value = torch.randn(param.shape, generator=generator, dtype=torch.float32) * 0.05
        if param.dim() <= 1 and full.rsplit(".", 1)[-1] == "weight":
            value = value + 1.0
        made[id(param)] = nn.Parameter(value.to(param.dtype), requires_grad=False)
    for module in model.modules():  # a parameter shared by several modules is replaced in each
        for pname, held in list(module._parameters.items()):
            if held is not None and id(held) in chosen:
                module._parameters[pname] = made[id(held)]
    return names
