"""Discovery of models whose forward reads weights outside the decoder layers (learned position embeddings,
embedding norms): the replica gives exactly the non-layer, non-vocabulary parameters random values."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from qhf.architectures import definition_for
from qhf.architectures.outside_layers import outside_parameters, randomize_outside, vocab_sizes
from qhf.source.skeleton import meta_parameters, meta_skeleton
from tiny_models import tiny_config
from torch import nn


def _expected_outside(model: nn.Module, layers_path: str) -> list[str]:
    """Every parameter outside the layers except the input embedding's and the output projection's."""
    vocab = {id(p) for m in (model.get_input_embeddings(), model.get_output_embeddings()) for p in m.parameters()}
    return [n for n, p in model.named_parameters() if not n.startswith(layers_path + ".") and id(p) not in vocab]


def test_opt_discovery_materializes_its_position_embedding_on_the_replica_only() -> None:
    config = tiny_config("opt", ffn_dim=128)
    model = meta_skeleton(config)
    found = definition_for(model, config)
    assert found.definition.layers_path == "model.decoder.layers"
    assert [g.modules for g in found.definition.groups] == [
        ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
        ("self_attn.out_proj",),
        ("fc1",),
        ("fc2",),
    ]
    assert list(found.outside) == [
        "model.decoder.embed_positions.weight",
        "model.decoder.final_layer_norm.weight",
        "model.decoder.final_layer_norm.bias",
    ]
    assert list(found.outside) == _expected_outside(model, "model.decoder.layers")
    # the skeleton itself stays on meta: discovery worked on its replica
    assert len(meta_parameters(model)) == len(list(model.named_parameters()))


def test_opt_with_projected_embeddings_materializes_the_projections_not_the_vocabulary() -> None:
    config = tiny_config("opt", ffn_dim=128, word_embed_proj_dim=32)
    model = meta_skeleton(config)
    found = definition_for(model, config)
    assert "model.decoder.project_in.weight" in found.outside
    assert "model.decoder.project_out.weight" in found.outside
    assert "model.decoder.embed_tokens.weight" not in found.outside
    assert "lm_head.weight" not in found.outside
    assert list(found.outside) == _expected_outside(model, "model.decoder.layers")


def test_bloom_discovery_materializes_its_embedding_layer_norm() -> None:
    config = tiny_config("bloom", n_head=4, n_layer=2)
    model = meta_skeleton(config)
    found = definition_for(model, config)
    assert found.definition.layers_path == "transformer.h"
    assert len(found.definition.groups) == 4
    assert found.definition.groups[0].prev_op == "input_layernorm"
    assert list(found.outside) == [
        "transformer.word_embeddings_layernorm.weight",
        "transformer.word_embeddings_layernorm.bias",
        "transformer.ln_f.weight",
        "transformer.ln_f.bias",
    ]
    assert list(found.outside) == _expected_outside(model, "transformer.h")


class _Toy(nn.Module):
    """A meta model: a vocabulary table, a position table shared by two modules, a norm, one layer."""

    def __init__(self) -> None:
        super().__init__()
        with torch.device("meta"):
            self.tokens = nn.Embedding(10, 4)
            self.positions = nn.Embedding(6, 4)
            self.positions_again = nn.Embedding(6, 4)
            self.norm = nn.LayerNorm(4)
            self.layers = nn.ModuleList([nn.Linear(4, 4)])
        self.positions_again.weight = self.positions.weight


def test_randomize_outside_skips_vocabulary_tables_and_layers_and_is_seeded() -> None:
    config = SimpleNamespace(vocab_size=10)
    first, second = _Toy(), _Toy()
    names = randomize_outside(first, "layers", config, torch.Generator().manual_seed(2))
    randomize_outside(second, "layers", config, torch.Generator().manual_seed(2))
    assert names == ["positions.weight", "norm.weight", "norm.bias"]
    assert outside_parameters(first, "layers", config) == []  # nothing left on meta to fill
    assert first.tokens.weight.device.type == "meta"  # vocab-sized: [10, 4]
    assert first.layers[0].weight.device.type == "meta"
    assert first.positions_again.weight is first.positions.weight  # a shared parameter stays shared
    assert torch.equal(first.positions.weight, second.positions.weight)
    assert (first.norm.weight - 1.0).abs().max() < 0.5  # norm-like weights near 1
    assert not torch.equal(first.norm.bias, torch.zeros(4))


def test_only_the_vocabulary_size_keeps_a_table_on_meta() -> None:
    # RoCBert's forward reads its shape table (shape_vocab_size), BERT's its token-type table (type_vocab_size)
    config = SimpleNamespace(vocab_size=320, type_vocab_size=2, shape_vocab_size=5000)
    assert vocab_sizes(config) == {320}

    class _Tables(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            with torch.device("meta"):
                self.tokens = nn.Embedding(320, 4)
                self.shapes = nn.Embedding(5000, 4)
                self.token_type = nn.Embedding(2, 4)
                self.layers = nn.ModuleList([nn.Linear(4, 4)])

    names = randomize_outside(_Tables(), "layers", config, torch.Generator().manual_seed(2))
    assert names == ["shapes.weight", "token_type.weight"]
