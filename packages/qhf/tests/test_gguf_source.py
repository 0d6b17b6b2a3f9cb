"""A native llama .gguf file as a source: written here with qformats' writer from a tiny HF model."""

from __future__ import annotations

import json

import numpy as np
import pytest
import qhf
import torch
from qhf.errors import SourceFormatError
from qhf.source import open_source
from safetensors import safe_open
from tiny_models import tiny_config

_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}


def _permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary row order for q/k (the inverse of qformats' unpermute_qk)."""
    half = weight.shape[0] // heads // 2
    return weight.reshape(heads, 2, half, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _write_tiny_gguf(path, model, config) -> None:
    from qformats.gguf_file import write_gguf

    tensors: dict[str, np.ndarray] = {}
    for name, param in model.state_dict().items():
        array = param.detach().numpy().astype(np.float32)
        if name == "model.embed_tokens.weight":
            tensors["token_embd.weight"] = array
        elif name == "model.norm.weight":
            tensors["output_norm.weight"] = array
        elif name == "lm_head.weight":
            continue  # tied
        else:
            index, rest = name.removeprefix("model.layers.").split(".", 1)
            if rest.endswith("q_proj.weight"):
                array = _permute(array, config.num_attention_heads)
            elif rest.endswith("k_proj.weight"):
                array = _permute(array, config.num_key_value_heads)
            tensors[f"blk.{index}.{_LAYER[rest]}"] = np.ascontiguousarray(array)
    metadata = {
        "general.architecture": "llama",
        "llama.context_length": config.max_position_embeddings,
        "llama.block_count": config.num_hidden_layers,
        "llama.feed_forward_length": config.intermediate_size,
        "llama.embedding_length": config.hidden_size,
        "llama.rope.dimension_count": config.hidden_size // config.num_attention_heads,
        "llama.rope.freq_base": 10000.0,
        "llama.attention.head_count": config.num_attention_heads,
        "llama.attention.head_count_kv": config.num_key_value_heads,
        "llama.attention.layer_norm_rms_epsilon": float(config.rms_norm_eps),
        "llama.vocab_size": config.vocab_size,
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 1,
    }
    write_gguf(path, metadata, tensors)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    config = tiny_config("llama", tie_word_embeddings=True)
    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    _write_tiny_gguf(path, model, config)
    return path, model


def test_gguf_source_matches_the_model_it_came_from(tiny_gguf) -> None:
    path, model = tiny_gguf
    source = open_source(path)
    assert source.kind == "gguf" and source.tied and source.num_layers == 2
    dense = source.materialize_all()
    ids = torch.arange(2, 30).unsqueeze(0)
    with torch.no_grad():
        assert torch.allclose(dense(ids).logits, model(ids).logits, atol=1e-5)


def test_gguf_source_quantizes_saves_and_reloads(tmp_path, tiny_gguf, tokenizer) -> None:
    path, _ = tiny_gguf
    qm = qhf.load(path, {"method": "rtn", "bits": 4, "group_size": 32}, tokenizer=tokenizer)
    qm.quantize()
    summary = qm.save(tmp_path / "q")
    assert summary.verified
    assert summary.dense_dtype == "float16"  # auto: a .gguf source's dense tensors are written as float16
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    assert config["dtype"] == "float16"
    with safe_open(str(tmp_path / "q" / "model.safetensors"), "pt") as handle:
        assert handle.get_tensor("model.embed_tokens.weight").dtype == torch.float16
        assert handle.get_tensor("model.norm.weight").dtype == torch.float16
    lm = qhf.load_quantized(tmp_path / "q")
    assert lm.model.lm_head.weight is lm.model.model.embed_tokens.weight
    assert len(lm.backends) == 14


def test_not_a_gguf_file(tmp_path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 40)
    with pytest.raises(SourceFormatError, match=r"bad\.gguf"):
        open_source(bad)


_GEMMA3_LAYER = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
    **{k: v for k, v in _LAYER.items() if not k.endswith("layernorm.weight")},
}


@pytest.fixture(scope="module")
def tiny_gemma3_gguf(tmp_path_factory):
    """A tiny Gemma 3 as llama.cpp stores it: its names, norms as ``1 + w``, no q/k permutation, tied."""
    from qformats.gguf_file import write_gguf
    from transformers import AutoModelForCausalLM

    # the 1/sqrt(head_dim) attention scale llama.cpp gives a Gemma 3 file (qformats reads it so)
    config = tiny_config("gemma3_text", tie_word_embeddings=True)
    config.query_pre_attn_scalar = config.head_dim
    torch.manual_seed(2)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    tensors: dict[str, np.ndarray] = {}
    for name, param in model.state_dict().items():
        array = param.detach().numpy().astype(np.float32)
        if name == "lm_head.weight":
            continue
        if name.endswith("norm.weight"):
            array = array + np.float32(0.25) + np.float32(1)  # a non-zero Gemma norm, stored as 1 + w
            with torch.no_grad():
                model.get_parameter(name).add_(0.25)
        if name == "model.embed_tokens.weight":
            tensors["token_embd.weight"] = array
        elif name == "model.norm.weight":
            tensors["output_norm.weight"] = array
        else:
            index, rest = name.removeprefix("model.layers.").split(".", 1)
            tensors[f"blk.{index}.{_GEMMA3_LAYER[rest]}"] = np.ascontiguousarray(array)
    a = "gemma3"
    metadata = {
        "general.architecture": a, f"{a}.context_length": 256, f"{a}.block_count": 2, f"{a}.feed_forward_length": 128,
        f"{a}.embedding_length": 64, f"{a}.attention.head_count": 4, f"{a}.attention.head_count_kv": 2,
        f"{a}.attention.key_length": 16, f"{a}.attention.sliding_window": 32, f"{a}.rope.freq_base": 1e6,
        f"{a}.attention.layer_norm_rms_epsilon": float(config.rms_norm_eps), "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 1, "tokenizer.ggml.tokens": [f"t{i}" for i in range(config.vocab_size)],
    }  # fmt: skip
    path = tmp_path_factory.mktemp("gguf") / "gemma3.gguf"
    write_gguf(path, metadata, tensors)
    return path, model


def test_gemma3_gguf_source_gives_the_model_and_quantizes(tmp_path, tiny_gemma3_gguf, tokenizer) -> None:
    path, model = tiny_gemma3_gguf
    source = open_source(path)
    assert source.kind == "gguf" and source.tied and source.config.model_type == "gemma3_text"
    assert type(source.model).__name__ == "Gemma3ForCausalLM"
    dense = source.materialize_all()
    ids = torch.arange(2, 40).unsqueeze(0)
    with torch.no_grad():
        assert torch.allclose(dense(ids).logits, model(ids).logits, atol=1e-5)
    qm = qhf.load(path, {"method": "rtn", "bits": 4, "group_size": 16}, tokenizer=tokenizer)
    qm.quantize()
    assert qm.save(tmp_path / "q").verified
    lm = qhf.load_quantized(tmp_path / "q")
    assert type(lm.model).__name__ == "Gemma3ForCausalLM" and len(lm.backends) == 14


def test_unknown_gguf_architecture_is_refused_by_name(tmp_path) -> None:
    from qformats.gguf_file import write_gguf

    path = tmp_path / "mamba.gguf"
    write_gguf(path, {"general.architecture": "mamba"}, {})
    with pytest.raises(SourceFormatError, match=r"mamba\.gguf: cannot read as a GGUF source: .*'mamba' is not read "
                       r"as a Hugging Face model: a state-space model .*; known architectures: falcon"):  # fmt: skip
        open_source(path)
