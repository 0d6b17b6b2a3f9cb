"""Opening Hugging Face directories lazily: skeleton on meta, layer-by-layer materialization, errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from qhf.errors import MissingFileError, SourceFormatError, UnsupportedArchitectureError
from qhf.source import meta_parameters, open_source
from tiny_models import save_tiny_model


def _dense(directory: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()


@pytest.mark.parametrize("model_type", ["llama", "qwen2", "mistral"])
def test_materialized_model_matches_transformers(tiny_dirs, model_type: str) -> None:
    directory = tiny_dirs(model_type)
    source = open_source(directory)
    assert meta_parameters(source.model)  # nothing read yet
    model = source.materialize_all()
    ids = torch.arange(3, 40).unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, _dense(directory)(ids).logits)


def test_layers_materialize_and_release_one_at_a_time(tiny_dirs) -> None:
    source = open_source(tiny_dirs("llama"))
    layer_bytes = source.materialize_layer(1)
    assert layer_bytes > 0
    assert all(not n.startswith("model.layers.1.") for n in meta_parameters(source.model))
    assert any(n.startswith("model.layers.0.") for n in meta_parameters(source.model))
    source.release_layer(1)
    assert any(n.startswith("model.layers.1.") for n in meta_parameters(source.model))
    assert source.materialize_base() > 0


def test_sharded_directory_and_tied_embeddings(tmp_path, tokenizer) -> None:
    directory = save_tiny_model(tmp_path / "m", "llama", shard="40KB", tokenizer=tokenizer, tie_word_embeddings=True)
    assert (directory / "model.safetensors.index.json").is_file()
    source = open_source(directory)
    assert len({p for p in source.names}) > 0 and "lm_head.weight" not in source.names
    model = source.materialize_all()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = torch.arange(3, 30).unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, _dense(directory)(ids).logits)


def test_experts_fused_in_the_files_read_and_listed_per_expert(tmp_path, tokenizer) -> None:
    """GPT-OSS stores its experts fused (``mlp.experts.gate_up_proj`` ``[E, H, 2I]``): the unfused skeleton
    reads each expert's slice, and ``tensor_names`` lists the unfused names instead of the fused ones."""
    moe = {"num_local_experts": 4, "num_experts_per_tok": 2}
    directory = save_tiny_model(tmp_path / "m", "gpt_oss", tokenizer=tokenizer, **moe)
    source = open_source(directory)
    fused = "model.layers.1.mlp.experts.gate_up_proj"
    assert fused in source.names
    names = source.tensor_names()
    assert fused not in names and "model.layers.1.mlp.experts.down_proj" not in names
    assert {f"model.layers.1.mlp.experts.{e}.up_proj.weight" for e in range(4)} <= set(names)
    model = source.materialize_all()
    ids = torch.arange(3, 30).unsqueeze(0)
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, _dense(directory)(ids).logits, atol=1e-5)


def test_experts_fused_under_another_file_name_are_read_per_expert(tmp_path, tokenizer) -> None:
    """GraniteMoE's files hold its fused experts as ``block_sparse_moe.input_linear.weight`` /
    ``output_linear.weight`` (transformers renames them to ``experts.gate_up_proj`` / ``down_proj`` on load): each
    unfused expert reads its slice of the renamed tensor and the model computes what transformers' does."""
    moe = {"num_local_experts": 4, "num_experts_per_tok": 2}
    directory = save_tiny_model(tmp_path / "m", "granitemoe", tokenizer=tokenizer, **moe)
    source = open_source(directory)
    stored = "model.layers.1.block_sparse_moe.input_linear.weight"
    assert stored in source.names and stored not in source.tensor_names()
    assert source.aliases["model.layers.1.block_sparse_moe.experts.2.up_proj.weight"].source == stored
    reads: list[str] = []
    get = source.get
    source.get = lambda name, dtype=None: reads.append(name) or get(name, dtype)  # type: ignore[method-assign]
    model = source.materialize_all()
    assert reads.count(stored) == 1  # every expert of the layer slices one read of the fused tensor
    source.get = get  # type: ignore[method-assign]
    for name, param in model.named_parameters():  # each expert's slice is its own copy, not a view of the fused
        if ".experts." in name:
            assert param.untyped_storage().nbytes() == param.numel() * param.element_size(), name
    ids = torch.arange(3, 30).unsqueeze(0)
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, _dense(directory)(ids).logits, atol=1e-5)


def test_missing_config_names_the_file(tmp_path, tiny_dirs) -> None:
    copy = Path(shutil.copytree(tiny_dirs("llama"), tmp_path / "c"))
    (copy / "config.json").unlink()
    with pytest.raises(MissingFileError, match=r"config\.json"):
        open_source(copy)


def test_missing_path(tmp_path) -> None:
    with pytest.raises(MissingFileError, match="nope"):
        open_source(tmp_path / "nope")


def test_missing_shard_names_it(tmp_path, tokenizer) -> None:
    directory = save_tiny_model(tmp_path / "m", "llama", shard="40KB", tokenizer=tokenizer)
    shard = sorted(directory.glob("model-*.safetensors"))[-1]
    shard.unlink()
    with pytest.raises(MissingFileError, match=shard.name):
        open_source(directory)


def test_pickle_weights_are_refused(tmp_path, tiny_dirs) -> None:
    copy = Path(shutil.copytree(tiny_dirs("llama"), tmp_path / "c"))
    (copy / "model.safetensors").unlink()
    (copy / "pytorch_model.bin").write_bytes(b"not really")
    with pytest.raises(SourceFormatError, match=r"pytorch_model\.bin.*execute code"):
        open_source(copy)


def test_no_weights_at_all(tmp_path, tiny_dirs) -> None:
    copy = Path(shutil.copytree(tiny_dirs("llama"), tmp_path / "c"))
    (copy / "model.safetensors").unlink()
    with pytest.raises(MissingFileError, match=r"model\.safetensors"):
        open_source(copy)


def test_weights_missing_a_tensor(tmp_path, tiny_dirs) -> None:
    from safetensors.torch import load_file, save_file

    copy = Path(shutil.copytree(tiny_dirs("llama"), tmp_path / "c"))
    tensors = load_file(copy / "model.safetensors")
    del tensors["model.layers.1.mlp.down_proj.weight"]
    save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(SourceFormatError, match=r"model\.layers\.1\.mlp\.down_proj\.weight"):
        open_source(copy)


def test_wrong_tensor_shape_is_named(tmp_path, tiny_dirs) -> None:
    from safetensors.torch import load_file, save_file

    copy = Path(shutil.copytree(tiny_dirs("llama"), tmp_path / "c"))
    tensors = load_file(copy / "model.safetensors")
    tensors["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    save_file(tensors, copy / "model.safetensors", metadata={"format": "pt"})
    source = open_source(copy)
    with pytest.raises(SourceFormatError, match=r"up_proj\.weight.*\(128, 64\).*\(3, 3\)"):
        source.materialize_layer(0)


def test_unsupported_architecture_from_directory(tmp_path, tiny_dirs) -> None:
    copy = Path(shutil.copytree(tiny_dirs("llama"), tmp_path / "c"))
    config = json.loads((copy / "config.json").read_text())
    config["model_type"] = "hy_v4"
    config["architectures"] = ["HYV4ForCausalLM"]
    (copy / "config.json").write_text(json.dumps(config))
    # HY-V4 hands each layer's topk_indices on to the next layer's call: discovery refuses it by name
    with pytest.raises(UnsupportedArchitectureError, match=r"passed to the next layer as `prev_topk_indices`"):
        open_source(copy)


def test_unreadable_config(tmp_path, tiny_dirs) -> None:
    copy = Path(shutil.copytree(tiny_dirs("llama"), tmp_path / "c"))
    (copy / "config.json").write_text("{not json")
    with pytest.raises(SourceFormatError, match=r"config\.json"):
        open_source(copy)
