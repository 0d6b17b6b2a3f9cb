"""Decoder layers counted by another config field (an encoder-decoder's ``*ForCausalLM``: BART, mBART): the
layer list and its count field found, cross-attention (never run without encoder states) kept dense."""

from __future__ import annotations

import pytest
import qhf
import torch
from qhf.architectures import definition_for
from qhf.architectures.layer_list import count_field, find_layer_list
from qhf.corpus import bundled_docs
from qhf.errors import UnsupportedArchitectureError
from qhf.source.skeleton import meta_skeleton
from qhf.tokenizer import token_blocks
from tiny_models import save_tiny_model, tiny_config
from torch import nn

# 2 encoder layers (num_hidden_layers maps to encoder_layers in these configs), 3 decoder layers
DECODER = {"decoder_layers": 3, "decoder_ffn_dim": 128, "decoder_attention_heads": 4, "encoder_ffn_dim": 128}
CROSS = ("encoder_attn.q_proj", "encoder_attn.k_proj", "encoder_attn.v_proj", "encoder_attn.out_proj")


@pytest.mark.parametrize("model_type", ["bart", "mbart"])
def test_the_decoder_list_and_its_count_field_are_found(model_type: str) -> None:
    config = tiny_config(model_type, **DECODER)
    assert config.num_hidden_layers == 2  # the encoder's count: no list of 2 layers in the causal LM
    found = find_layer_list(meta_skeleton(config), config)
    assert (found.path, found.field, found.count) == ("model.decoder.layers", "decoder_layers", 3)


@pytest.mark.parametrize("model_type", ["bart", "mbart"])
def test_cross_attention_is_kept_dense_with_its_reason(model_type: str) -> None:
    config = tiny_config(model_type, **DECODER)
    discovery = definition_for(meta_skeleton(config), config)
    definition = discovery.definition
    assert definition.layers_path == "model.decoder.layers" and discovery.layers_field == "decoder_layers"
    assert "decoder_layers" in discovery.notes["model.decoder.layers"]
    quantized = {m for g in definition.groups for m in g.modules}
    assert {"self_attn.q_proj", "self_attn.out_proj", "fc1", "fc2"} <= quantized
    assert not quantized & set(CROSS)
    (structure,) = discovery.structures.values()
    for name in CROSS:
        assert "'encoder_attn' never ran" in structure.left_dense[name]
    assert discovery.layer_structures == {0: [0, 1, 2]}


def test_a_llama_keeps_num_hidden_layers_as_its_field() -> None:
    config = tiny_config("llama")
    discovery = definition_for(meta_skeleton(config), config)
    assert discovery.layers_field == "num_hidden_layers" and discovery.notes == {}


def test_two_stacks_of_layers_are_refused_by_name() -> None:
    config = tiny_config("hrm_text")  # 2 + 2 layers (L_module, H_module) cycled to num_hidden_layers = 16 slots
    assert config.num_hidden_layers == 16 and config.num_layers_per_stack == 2
    with pytest.raises(UnsupportedArchitectureError, match=r"several lists of repeated blocks.*H_module\.layers"):
        find_layer_list(meta_skeleton(config), config)


def test_the_count_field_prefers_the_lists_own_name() -> None:
    fields = {"decoder_attention_heads": 3, "decoder_layers": 3, "encoder_layers": 3, "max_layer_norms": 3}
    assert count_field("model.decoder.layers", fields, 3) == "decoder_layers"
    assert count_field("model.blocks", {"a_count": 3, "n_layer": 3}, 3) == "n_layer"
    assert count_field("model.blocks", {"b_count": 3, "a_count": 3}, 3) == "a_count"


def test_bart_quantizes_saves_and_reloads_with_cross_attention_dense(tmp_path, tokenizer) -> None:
    src = save_tiny_model(tmp_path / "m", "bart", tokenizer=tokenizer, **DECODER)
    qm = qhf.load(src, {"method": "gptq", "bits": 4, "group_size": 32})
    assert qm.source.num_layers == 3
    qm.quantize(token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=32))
    layer = qm.model.get_submodule("model.decoder.layers.2")
    assert all(type(layer.get_submodule(name)) is nn.Linear for name in CROSS)
    assert type(layer.get_submodule("fc1")) is not nn.Linear  # quantized
    qm.save(tmp_path / "out")
    loaded = qhf.load_quantized(tmp_path / "out")
    ids = torch.randint(0, 300, (1, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(qm.model(ids, use_cache=False).logits, loaded(ids, use_cache=False).logits)


def test_a_model_that_reads_only_token_ids_is_discovered_on_ids() -> None:
    """CPM-Ant's forward ignores inputs_embeds (its segments and prompt come from the ids): discovery falls back
    to random token ids through a stand-in embedding and records that; a llama never does."""
    config = tiny_config("cpmant", dim_ff=128, dim_head=16)
    discovery = definition_for(meta_skeleton(config), config)
    assert "inputs_embeds forward failed (AttributeError" in discovery.notes["<inputs>"]
    quantized = {m for g in discovery.definition.groups for m in g.modules}
    assert {"self_att.self_attention.project_q", "ffn.ffn.w_out"} <= quantized
    llama = tiny_config("llama")
    assert "<inputs>" not in definition_for(meta_skeleton(llama), llama).notes
