"""Source files that transformers converts on load (split / merged projections, renames, interleaved experts):
the streamed skeleton gets exactly the tensors ``from_pretrained`` builds, and a quantized checkpoint is saved
under the module names transformers' model has."""

from __future__ import annotations

import pytest
import torch
from qhf.errors import SourceFormatError
from qhf.source import open_source
from qhf.source.skeleton import fused_expert_slices, persistent_buffers
from qhf.source.tensor_aliases import Converted
from tiny_models import save_tiny_model

MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 64}

# model_type -> (tiny fields, a file tensor its conversion reads, a skeleton name that conversion gives)
CONVERTED = {
    # GQA attention fused as query_key_value, split by each target's size (Split(dim=0))
    "sarvam_moe": (
        {**MOE, "num_experts": 4, "n_group": 1, "topk_group": 1, "head_dim": 16},
        "model.layers.0.attention.query_key_value.weight",
        "model.layers.0.self_attn.k_proj.weight",
    ),
    # gated delta net in_proj [q|k|v|z|b|a] split into four targets
    "lara_mini": (
        {**MOE, "num_experts": 4, "shared_expert_intermediate_size": 64, "head_dim": 16, "sliding_window": 32},
        "model.layers.0.linear_attn.in_proj.weight",
        "model.layers.0.linear_attn.in_proj_b.weight",
    ),
    # q/k/v depthwise convolutions concatenated into one (Concatenate(dim=0)); experts w1/w3/w2 per expert
    "kimi_linear": (
        {**MOE, "num_local_experts": 4, "num_experts": 4, "n_group": 1, "topk_group": 1, "head_dim": 16},
        "model.layers.0.self_attn.v_conv1d.weight",
        "model.layers.0.self_attn.conv1d.weight",
    ),
    # fused experts stored gate/up concatenated, interleaved on load (Interleave(dim=1)); vocab unpadded
    "inkling2_text": (
        {
            **MOE,
            "num_local_experts": 4,
            "n_routed_experts": 4,
            "head_dim": 16,
            "sliding_window": 32,
            "unpadded_vocab_size": 320,
        },
        "model.llm.layers.0.mlp.experts.w13_weight",
        "model.layers.0.mlp.experts.1.up_proj.weight",
    ),
}


def _fill_zero_tensors(directory) -> None:
    """Random values in every all-zero tensor of the files (a router's correction bias starts at zero), so a
    tensor left at its initial value instead of read shows."""
    from safetensors.torch import load_file, save_file

    generator = torch.Generator().manual_seed(1)
    for shard in directory.glob("*.safetensors"):
        tensors = load_file(shard)
        for name, tensor in tensors.items():
            if tensor.is_floating_point() and not tensor.any():
                tensors[name] = torch.randn(tensor.shape, generator=generator).to(tensor.dtype)
        save_file(tensors, shard, metadata={"format": "pt"})


@pytest.mark.parametrize("model_type", sorted(CONVERTED))
def test_streamed_weights_equal_transformers_loaded_state_dict(tmp_path, tokenizer, model_type: str) -> None:
    """Every skeleton parameter, materialized layer by layer from the files, equals the tensor transformers'
    ``from_pretrained`` loads (an unfused expert: its slice of transformers' fused tensor), bit for bit."""
    from transformers import AutoModelForCausalLM

    fields, file_tensor, converted = CONVERTED[model_type]
    directory = save_tiny_model(tmp_path / "m", model_type, tokenizer=tokenizer, **fields)
    _fill_zero_tensors(directory)
    source = open_source(directory)
    assert file_tensor in source.names and converted not in source.names
    reader = source.aliases[converted]
    assert isinstance(reader, Converted) and file_tensor in reader.sources
    names = source.tensor_names()
    assert converted in names and file_tensor not in names  # saved under the module's name
    source.materialize_base()
    for index in range(source.num_layers):
        source.materialize_layer(index)
    loaded = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    expected = loaded.state_dict()
    fused = fused_expert_slices(source.model)
    slices = {f"{m}.{rel}": (m, where) for m, parts in fused.items() for rel, where in parts.items()}
    compared = 0
    for name in persistent_buffers(source.model):  # read from the files too (Sarvam's renamed expert_bias)
        if name in expected:
            buffer = source.model.get_buffer(name)
            assert buffer.dtype == expected[name].dtype and torch.equal(buffer, expected[name]), name
    for name, param in source.model.named_parameters():
        if name in expected:
            want = expected[name]
        else:  # an unfused expert: its part of transformers' fused tensor
            module, where = slices[name]
            want = where.take(expected[f"{module}.{where.fused_name}"])
        assert param.dtype == want.dtype and torch.equal(param, want), name
        compared += 1
    assert compared == len(list(source.model.named_parameters()))


def test_quantized_checkpoint_keeps_transformers_module_names(tmp_path, tokenizer) -> None:
    """A Sarvam-MoE source (``attention.query_key_value`` in the files) quantizes to ``self_attn.q_proj`` /
    ``k_proj`` / ``v_proj`` modules: the checkpoint names are transformers' module names, which its conversion
    mapping leaves as they are (so ``from_pretrained``-based loaders read them), and ``load_quantized`` reloads
    the same logits."""
    import qhf
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import token_blocks
    from safetensors import safe_open
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, rename_source_key

    fields = CONVERTED["sarvam_moe"][0]
    directory = save_tiny_model(tmp_path / "m", "sarvam_moe", tokenizer=tokenizer, **fields)
    qm = qhf.load(directory, {"method": "gptq", "bits": 4, "group_size": 32})
    qm.quantize(token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=2, length=32))
    qm.save(tmp_path / "out")
    keys: set[str] = set()
    for shard in (tmp_path / "out").glob("*.safetensors"):
        with safe_open(shard, "pt") as f:
            keys |= set(f.keys())
    assert {f"model.layers.0.self_attn.{p}_proj.qweight" for p in "qkv"} <= keys
    assert not any("query_key_value" in k or ".attention." in k or "word_embeddings" in k for k in keys)
    transforms = get_model_conversion_mapping(qm.model)
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    renamings = [t for t in transforms if not isinstance(t, WeightConverter)]
    assert all(rename_source_key(k, renamings, converters) == (k, None) for k in keys)
    loaded = qhf.load_quantized(tmp_path / "out")
    ids = torch.arange(3, 27).unsqueeze(0)
    with torch.no_grad():
        assert torch.equal(qm.model(ids, use_cache=False).logits, loaded(ids, use_cache=False).logits)


def test_conversion_into_a_tensor_the_model_lacks_names_it(tmp_path, tokenizer) -> None:
    """A file tensor transformers would convert into names the model does not have is refused by name."""
    import json

    from safetensors.torch import load_file, save_file

    fields = CONVERTED["sarvam_moe"][0]
    directory = save_tiny_model(tmp_path / "m", "sarvam_moe", tokenizer=tokenizer, **fields)
    tensors = load_file(directory / "model.safetensors")
    tensors["model.layers.9.attention.query_key_value.weight"] = torch.zeros(128, 64)
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})
    json.loads((directory / "config.json").read_text())  # the config is untouched: 2 layers
    with pytest.raises(SourceFormatError, match=r"layers\.9\.attention\.query_key_value.*converts it into"):
        open_source(directory)
