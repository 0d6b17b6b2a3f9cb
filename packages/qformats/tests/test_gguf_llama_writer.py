"""Writing a llama .gguf for llama.cpp: names, q/k permutation, metadata, tokenizer, refusals, directories (the
other architectures: test_gguf_model_writer.py)."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from checkpoint_fixtures import GPTQ_CONFIG
from qformats.checkpoint import write_checkpoint
from qformats.gguf_file import GGUFFileError, GGUFReader, read_llama_gguf
from qformats.gguf_file.directory_export import export_directory
from qformats.gguf_file.llama import hf_name, unpermute_qk
from qformats.gguf_file.model_writer import write_model_gguf as write_llama_gguf
from qformats.gguf_file.tokenizer_metadata import tokenizer_from_gguf, tokenizer_from_hf
from qformats.gguf_file.values import ValueType
from qformats.gguf_file.write_names import LLAMA, gguf_name, permute_qk
from qformats.gguf_file.write_shapes import expected_shapes as shapes_of
from qformats.layouts.gguf import encode_rows
from qformats.transcode import transcode_weight
from random_weights import random_weight

CONFIG = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 48, "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "bos_token_id": 0,
    "eos_token_id": 1, "rope_parameters": {"rope_theta": 5e5, "rope_type": "default"},
}  # fmt: skip
VOCAB = {"<s>": 0, "</s>": 1, **{chr(ord("a") + i): 2 + i for i in range(26)}, "ab": 28, "abc": 29}


def expected_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    return shapes_of(config, LLAMA)


def _llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """What llama.cpp's converter does to q/k rows (written independently of qformats)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _state_dict(config: dict, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in expected_shapes(config).items()}


def _tokenizer_dir(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    tokenizer = {
        "added_tokens": [{"id": 0, "content": "<s>", "special": True}, {"id": 1, "content": "</s>", "special": True},
                         {"id": 30, "content": "<tool>", "special": False}],
        "post_processor": None,
        "model": {"type": "BPE", "byte_fallback": False, "vocab": VOCAB, "merges": [["a", "b"], "ab c"]},
    }  # fmt: skip
    (root / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    tok_config = {"bos_token": "<s>", "eos_token": {"content": "</s>"}, "chat_template": "{{ messages }}"}
    (root / "tokenizer_config.json").write_text(json.dumps(tok_config), encoding="utf-8")
    return root


def test_names_round_trip_and_permutation_inverse() -> None:
    for hf in expected_shapes(CONFIG):
        name = gguf_name(hf)
        assert name is not None and hf_name(name) == hf
    assert gguf_name("model.layers.0.self_attn.rotary_emb.inv_freq") is None
    w = np.arange(48 * 3, dtype=np.float32).reshape(48, 3)
    for heads in (1, 2, 4, 6):
        assert np.array_equal(permute_qk(w, heads), _llama_cpp_permute(w, heads))
        assert np.array_equal(unpermute_qk(permute_qk(w, heads), heads), w)
    with pytest.raises(GGUFFileError, match=r"attn_q: 48 rows cannot be split into 5 heads"):
        permute_qk(w, 5, name="attn_q")


@pytest.mark.parametrize("tied", [False, True])
def test_write_then_read_gives_the_same_state_dict(tmp_path: Path, tied: bool) -> None:
    config = {**CONFIG, "tie_word_embeddings": tied}
    sd = _state_dict(config)
    tokenizer = tokenizer_from_hf(_tokenizer_dir(tmp_path / "tok"), config)
    path = tmp_path / "m.gguf"
    summary = write_llama_gguf(path, config, sd.items(), tokenizer, qtype="F32", embed_qtype="F32", name="tiny")
    assert summary.types == {"F32": len(sd)}
    back = read_llama_gguf(path)
    assert sorted(back.names) == sorted(sd)
    for name, value in back.items():
        assert np.array_equal(value, sd[name]), name
    assert ("output.weight" in back.reader.tensors) is not tied
    assert back.config["tie_word_embeddings"] is tied
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "vocab_size",
                "intermediate_size", "max_position_embeddings", "rms_norm_eps"):  # fmt: skip
        assert back.config[key] == pytest.approx(config[key]), key
    assert back.config["rope_theta"] == 5e5


def test_metadata_keys_types_and_tokenizer(tmp_path: Path) -> None:
    sd = _state_dict(CONFIG)
    tokenizer = tokenizer_from_hf(_tokenizer_dir(tmp_path / "tok"), CONFIG)
    path = tmp_path / "m.gguf"
    write_llama_gguf(path, CONFIG, sd.items(), tokenizer, qtype="Q8_0")
    fields = gguf.GGUFReader(str(path)).fields  # an independent reader: llama.cpp checks these types
    uint32 = ("llama.context_length", "llama.embedding_length", "llama.block_count", "llama.feed_forward_length",
              "llama.rope.dimension_count", "llama.attention.head_count", "llama.attention.head_count_kv",
              "llama.vocab_size", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
              "general.file_type")  # fmt: skip
    for key in uint32:
        assert fields[key].types == [gguf.GGUFValueType.UINT32], key
    for key in ("llama.rope.freq_base", "llama.attention.layer_norm_rms_epsilon"):
        assert fields[key].types == [gguf.GGUFValueType.FLOAT32], key
    reader = GGUFReader(path)
    value = reader.value
    assert value("general.architecture") == "llama" and value("general.file_type") == 7  # MOSTLY_Q8_0
    assert (value("llama.rope.dimension_count"), value("llama.attention.head_count_kv")) == (16, 2)
    tokens = value("tokenizer.ggml.tokens")
    assert len(tokens) == 48 and tokens[:3] == ["<s>", "</s>", "a"] and tokens[30] == "<tool>"
    assert tokens[31] == "[PAD31]"
    types = value("tokenizer.ggml.token_type")
    assert (types[0], types[2], types[30], types[31]) == (3, 1, 4, 5)
    assert value("tokenizer.ggml.merges") == ["a b", "ab c"]
    assert (value("tokenizer.ggml.bos_token_id"), value("tokenizer.ggml.eos_token_id")) == (0, 1)
    assert value("tokenizer.ggml.model") == "gpt2" and value("tokenizer.chat_template") == "{{ messages }}"
    assert value("tokenizer.ggml.add_bos_token") is False
    assert reader.tensors["blk.1.attn_q.weight"].type.name == "Q8_0"
    assert reader.tensors["output_norm.weight"].type.name == "F32"
    carried = tokenizer_from_gguf(reader)
    assert carried["tokenizer.ggml.tokens"].value == tokens
    assert carried["tokenizer.ggml.bos_token_id"].type == ValueType.UINT32


def test_block_bytes_go_across_unchanged_with_qk_rows_permuted(tmp_path: Path) -> None:
    sd = _state_dict(CONFIG)
    blocks = {n: encode_rows(w, "Q4_0") for n, w in sd.items() if w.ndim == 2}
    sources = [(n, (blocks[n], "Q4_0") if n in blocks else w) for n, w in sd.items()]
    tokenizer = tokenizer_from_hf(_tokenizer_dir(tmp_path / "tok"), CONFIG)
    path = tmp_path / "m.gguf"
    write_llama_gguf(path, CONFIG, sources, tokenizer)
    reader = GGUFReader(path)
    raw = reader.array("blk.0.attn_k.weight")
    assert np.array_equal(raw, permute_qk(blocks["model.layers.0.self_attn.k_proj.weight"], 2))
    assert np.array_equal(reader.array("blk.0.ffn_down.weight"), blocks["model.layers.0.mlp.down_proj.weight"])


def test_refusals_name_the_field_or_tensor(tmp_path: Path) -> None:
    sd = _state_dict(CONFIG)
    tok = tokenizer_from_hf(_tokenizer_dir(tmp_path / "tok"), CONFIG)
    out = tmp_path / "x.gguf"
    gpt2 = {**CONFIG, "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}
    with pytest.raises(GGUFFileError, match=r"model_type 'gpt2': the .gguf writer writes llama, mistral, qwen2"):
        write_llama_gguf(out, gpt2, sd.items(), tok)
    with pytest.raises(GGUFFileError, match=r"config attention_bias = True .*no projection biases"):
        write_llama_gguf(out, {**CONFIG, "attention_bias": True}, sd.items(), tok)
    yarn = {**CONFIG, "rope_parameters": {"rope_type": "llama3", "factor": 8.0, "rope_theta": 5e5}}
    with pytest.raises(GGUFFileError, match=r"rope type 'llama3'"):
        write_llama_gguf(out, yarn, sd.items(), tok)
    q1 = [(n, (encode_rows(w, "Q1_0"), "Q1_0") if w.ndim == 2 else w) for n, w in sd.items()]
    with pytest.raises(GGUFFileError, match=r"model.embed_tokens.weight.*Q1_0 cannot be written for llama.cpp"):
        write_llama_gguf(out, CONFIG, q1, tok)
    with pytest.raises(GGUFFileError, match=r"lm_head.weight.*rows of 64 values are not whole Q4_K blocks of 256"):
        write_llama_gguf(out, CONFIG, sd.items(), tok, qtype="Q4_K")
    bias = [*sd.items(), ("model.layers.0.self_attn.q_proj.bias", np.zeros(64, np.float32))]
    with pytest.raises(GGUFFileError, match=r"q_proj.bias.*no llama.cpp tensor"):
        write_llama_gguf(out, CONFIG, bias, tok)
    with pytest.raises(GGUFFileError, match=r"lacks 1 tensor.*model.layers.1.mlp.up_proj.weight"):
        partial = [(n, w) for n, w in sd.items() if n != "model.layers.1.mlp.up_proj.weight"]
        write_llama_gguf(out, CONFIG, partial, tok)
    wrong = {**sd, "model.norm.weight": np.zeros(63, np.float32)}
    with pytest.raises(GGUFFileError, match=r"model.norm.weight.*expected shape \(64,\)"):
        write_llama_gguf(out, CONFIG, wrong.items(), tok)
    assert not out.exists()


def test_gptq_directory_exports_exactly_and_requantizes_the_rest(tmp_path: Path) -> None:
    """A GPTQ directory: sym 4-bit group-32 modules become Q4_0 bit exactly; an asym one is requantized."""
    rng = np.random.default_rng(1)
    sd = _state_dict(CONFIG)
    tensors: dict[str, np.ndarray] = {}
    weights = {}
    for name, shape in expected_shapes(CONFIG).items():
        prefix = name[: -len(".weight")]
        if "layers" in name and "proj" in name:
            weights[prefix] = random_weight(rng, shape[0], shape[1], 4, 32, sym=True)
            for key, arr in transcode_weight(weights[prefix], "gptq").tensors.items():
                tensors[f"{prefix}.{key}"] = arr
        else:
            tensors[name] = sd[name]
    root = tmp_path / "gptq"
    write_checkpoint(root, tensors, quantize_config=dict(GPTQ_CONFIG), model_config=CONFIG)
    _tokenizer_dir(root)
    report = export_directory(root, tmp_path / "g.gguf")
    assert (len(report.exact), len(report.requantized)) == (14, 0)
    back = read_llama_gguf(tmp_path / "g.gguf")
    for prefix, weight in weights.items():
        assert np.array_equal(back.tensor(f"{prefix}.weight"), weight.dequantize()), prefix
    assert np.array_equal(back.tensor("model.norm.weight"), sd["model.norm.weight"])
