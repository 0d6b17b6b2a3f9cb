"""The .gguf writer beyond llama: every architecture record it writes round-trips through ``read_gguf``, with the
metadata llama.cpp reads (keys and GGUF types read back by gguf-py), the stored conversions (Gemma's ``1 + w``
norms, split MoE experts, Qwen2-MoE's row-vector gate), per-expert quantized projections stacked, and the
refusals named. (llama itself: test_gguf_llama_writer.py; against transformers and gguf-py's converter layout:
tests-integration/test_gguf_writer_vs_transformers.py; in llama.cpp: tests-llamacpp.)"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
from qformats.gguf_file import GGUFFileError, GGUFReader, read_gguf
from qformats.gguf_file.architecture_table import ARCHITECTURES, architecture_record
from qformats.gguf_file.model_writer import write_model_gguf
from qformats.gguf_file.values import GGUFValue, ValueType
from qformats.gguf_file.write_metadata import writable_record
from qformats.gguf_file.write_shapes import expected_shapes
from qformats.layouts.gguf import encode_rows

BASE = {"vocab_size": 40, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False, "rope_parameters": {"rope_theta": 5e5, "rope_type": "default"}}  # fmt: skip
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
GEMMA_ROPE = {"full_attention": {"rope_theta": 1e6, "rope_type": "default"},
              "sliding_attention": {"rope_theta": 1e4, "rope_type": "default"}}  # fmt: skip
# per record key: config overrides (model_type and architectures come from the record)
CONFIGS: dict[str, dict] = {
    "llama": {},
    "mistral": {"sliding_window": 4096},
    "qwen2": {"use_sliding_window": False},
    "qwen2moe": {**MOE, "shared_expert_intermediate_size": 64, "norm_topk_prob": False},
    "qwen3": {"head_dim": 32},
    "qwen3moe": {**MOE, "head_dim": 16, "norm_topk_prob": True},
    "phi3": {"partial_rotary_factor": 0.5},
    "gemma2": {"head_dim": 32, "query_pre_attn_scalar": 32, "sliding_window": 64, "attn_logit_softcapping": 50.0,
               "final_logit_softcapping": 30.0, "tie_word_embeddings": True},
    "gemma3": {"head_dim": 32, "query_pre_attn_scalar": 32, "sliding_window": 64, "tie_word_embeddings": True,
               "layer_types": ["sliding_attention", "sliding_attention"], "rope_parameters": GEMMA_ROPE},
    "starcoder2": {"norm_epsilon": 1e-5, "use_bias": True},
    "stablelm": {"layer_norm_eps": 1e-5, "use_qkv_bias": True, "use_parallel_residual": False,
                 "partial_rotary_factor": 0.25},
    "nemotron": {"norm_eps": 1e-5, "partial_rotary_factor": 0.5},
}  # fmt: skip
WRITTEN = [record.key for record in ARCHITECTURES if record.write.refused is None]
# metadata keys beyond the core ones, per record (what llama.cpp's converter adds for them)
EXTRA_KEYS = {
    "qwen3": {"attention.key_length", "attention.value_length"},
    "qwen3moe": {"attention.key_length", "attention.value_length", "expert_count", "expert_used_count",
                 "expert_feed_forward_length"},
    "qwen2moe": {"expert_count", "expert_used_count", "expert_feed_forward_length",
                 "expert_shared_feed_forward_length"},
    "gemma2": {"attention.key_length", "attention.value_length", "attention.sliding_window",
               "attn_logit_softcapping", "final_logit_softcapping"},
    "gemma3": {"attention.key_length", "attention.value_length", "attention.sliding_window", "rope.freq_base_swa"},
}  # fmt: skip
CORE = {"vocab_size", "context_length", "embedding_length", "block_count", "feed_forward_length",
        "rope.dimension_count", "rope.freq_base", "attention.head_count", "attention.head_count_kv"}  # fmt: skip
FLOAT_KEYS = ("rope.freq_base", "layer_norm", "softcapping", "freq_base_swa")


def _config(key: str) -> dict:
    record = architecture_record(key)
    return {**BASE, "model_type": record.model_type, "architectures": [record.hf_class], **CONFIGS[key]}


def _tokenizer(vocab: int) -> dict[str, GGUFValue]:
    return {"tokenizer.ggml.model": GGUFValue(ValueType.STRING, "gpt2"),
            "tokenizer.ggml.tokens": GGUFValue(ValueType.ARRAY, [f"t{i}" for i in range(vocab)], ValueType.STRING),
            "tokenizer.ggml.bos_token_id": GGUFValue(ValueType.UINT32, 2)}  # fmt: skip


def _state_dict(config: dict, key: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Values on a 1/64 grid below 4, so that Gemma's stored ``w + 1`` reads back exactly."""
    rng = np.random.default_rng(seed)
    shapes = expected_shapes(config, architecture_record(key))
    return {n: (rng.integers(-128, 128, size=s) / 64).astype(np.float32) for n, s in shapes.items()}


def test_every_written_record_is_checked_here() -> None:
    assert sorted(WRITTEN) == sorted(CONFIGS)
    assert sorted(r.key for r in ARCHITECTURES if r.write.refused is not None) == ["falcon", "falcon-2norm"]


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_write_then_read_gives_the_model_back(tmp_path: Path, key: str) -> None:
    config = _config(key)
    sd = _state_dict(config, key)
    path = tmp_path / f"{key}.gguf"
    name = "mistral" if key == "mistral" else f"tiny {key}"  # a llama file reads as Mistral under this name
    summary = write_model_gguf(path, config, sd.items(), _tokenizer(40), qtype="F32", embed_qtype="F32", name=name)
    assert summary.architecture == key
    back = read_gguf(path)
    assert back.architecture.key == key
    assert sorted(back.names) == sorted(sd)
    for hf, value in back.items():
        assert np.array_equal(value, sd[hf]), f"{key}: {hf}"
    for field in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                  "num_key_value_heads", "max_position_embeddings", "tie_word_embeddings"):  # fmt: skip
        assert back.config[field] == config[field], f"{key}: {field}"
    for field in ("head_dim", "sliding_window", "num_experts", "moe_intermediate_size", "attn_logit_softcapping",
                  "shared_expert_intermediate_size", "use_qkv_bias", "use_parallel_residual"):  # fmt: skip
        if field in back.config:
            expected = config.get(field, 16) if field == "head_dim" else config[field]
            assert back.config[field] == pytest.approx(expected), f"{key}: {field}"
    if key == "mistral":
        assert summary.unused == ["sliding_window = 4096 (llama.cpp attends to the whole context (same logits "
                                  "within the window))"]  # fmt: skip


@pytest.mark.parametrize("key", sorted(CONFIGS))
def test_metadata_keys_and_types_read_by_gguf_py(tmp_path: Path, key: str) -> None:
    config = _config(key)
    path = tmp_path / f"{key}.gguf"
    write_model_gguf(path, config, _state_dict(config, key).items(), _tokenizer(40), qtype="Q8_0")
    record = architecture_record(key)
    fields = gguf.GGUFReader(str(path)).fields
    arch = fields["general.architecture"]
    assert bytes(arch.parts[arch.data[0]]).decode() == record.gguf
    prefix = f"{record.gguf}."
    keys = {k[len(prefix) :] for k in fields if k.startswith(prefix)}
    eps = {k for k in keys if k.startswith("attention.layer_norm")}
    # nemotron: llama.cpp reads attention.layer_norm_epsilon, transformers attention.layer_norm_rms_epsilon
    assert len(eps) == (2 if key == "nemotron" else 1), eps
    assert keys - eps == CORE | EXTRA_KEYS.get(key, set()), sorted(keys ^ (CORE | EXTRA_KEYS.get(key, set())))
    for k in keys:
        want = gguf.GGUFValueType.FLOAT32 if any(f in k for f in FLOAT_KEYS) else gguf.GGUFValueType.UINT32
        assert fields[prefix + k].types == [want], f"{key}: {k}"
    value = GGUFReader(path).value
    rotary = {"phi3": 8, "stablelm": 4, "nemotron": 8}.get(key, config.get("head_dim", 16))
    assert value(f"{prefix}rope.dimension_count") == rotary
    if key == "gemma3":
        assert (value("gemma3.rope.freq_base"), value("gemma3.rope.freq_base_swa")) == (1e6, 1e4)
        assert value("gemma3.attention.sliding_window") == 64


def test_stored_conversions(tmp_path: Path) -> None:
    """Gemma norms as 1 + w, MoE experts split into gate / up stacks, Qwen2-MoE's shared gate as a vector,
    routers F32 whatever qtype is asked, no rotary permutation outside the llama records."""
    config = _config("gemma3")
    sd = _state_dict(config, "gemma3")
    write_model_gguf(tmp_path / "g.gguf", config, sd.items(), _tokenizer(40), qtype="F32", embed_qtype="F32")
    reader = GGUFReader(tmp_path / "g.gguf")
    assert np.array_equal(reader.array("blk.1.attn_q_norm.weight"), sd["model.layers.1.self_attn.q_norm.weight"] + 1)
    assert np.array_equal(reader.array("output_norm.weight"), sd["model.norm.weight"] + 1)
    assert np.array_equal(reader.array("blk.0.attn_q.weight"), sd["model.layers.0.self_attn.q_proj.weight"])
    assert "output.weight" not in reader.tensors

    config = _config("qwen2moe")
    sd = _state_dict(config, "qwen2moe")
    write_model_gguf(tmp_path / "m.gguf", config, sd.items(), _tokenizer(40), qtype="Q8_0")
    reader = GGUFReader(tmp_path / "m.gguf")
    fused = sd["model.layers.1.mlp.experts.gate_up_proj"]
    gate, up = reader.dequantize("blk.1.ffn_gate_exps.weight"), reader.dequantize("blk.1.ffn_up_exps.weight")
    assert gate.shape == up.shape == (4, 32, 64)
    assert np.abs(gate - fused[:, :32]).max() < 0.05 and np.abs(up - fused[:, 32:]).max() < 0.05
    assert reader.tensors["blk.0.ffn_gate_exps.weight"].type.name == "Q8_0"
    assert reader.tensors["blk.0.ffn_gate_inp.weight"].type.name == "F32"
    shared = reader.array("blk.0.ffn_gate_inp_shexp.weight")
    assert shared.shape == (64,) and np.array_equal(shared, sd["model.layers.0.mlp.shared_expert_gate.weight"][0])


def test_per_expert_block_bytes_are_stacked_unchanged(tmp_path: Path) -> None:
    """A quantized checkpoint's per-expert projections (Q4_0 bytes) become the stacked expert tensors, bit for bit."""
    config = _config("qwen3moe")
    sd = _state_dict(config, "qwen3moe")
    tensors: list[tuple[str, object]] = []
    blocks: dict[tuple[int, str], list[np.ndarray]] = {}
    for name, value in sd.items():
        if not name.endswith(("experts.gate_up_proj", "experts.down_proj")):
            tensors.append((name, value))
            continue
        layer = int(name.split(".")[2])
        for e in range(4):
            parts = {"down": value[e]} if name.endswith("down_proj") else {"gate": value[e, :32], "up": value[e, 32:]}
            for proj, rows in parts.items():
                encoded = encode_rows(np.ascontiguousarray(rows), "Q4_0")
                blocks.setdefault((layer, proj), []).append(encoded)
                tensors.append((f"model.layers.{layer}.mlp.experts.{e}.{proj}_proj.weight", (encoded, "Q4_0")))
    write_model_gguf(tmp_path / "q.gguf", config, tensors, _tokenizer(40))
    reader = GGUFReader(tmp_path / "q.gguf")
    for (layer, proj), rows in blocks.items():
        stored = reader.array(f"blk.{layer}.ffn_{proj}_exps.weight")
        assert reader.tensors[f"blk.{layer}.ffn_{proj}_exps.weight"].type.name == "Q4_0"
        assert np.array_equal(stored, np.stack(rows)), (layer, proj)
    partial = [t for t in tensors if not t[0].endswith("1.mlp.experts.3.up_proj.weight")]
    with pytest.raises(GGUFFileError, match=r"lacks experts: model.layers.1.mlp.experts.<e>.up_proj \(3 of 4\)"):
        write_model_gguf(tmp_path / "x.gguf", config, partial, _tokenizer(40))


@pytest.mark.parametrize(
    ("key", "change", "message"),
    [
        ("nemotron", {"tie_word_embeddings": True}, r"tie_word_embeddings is true but llama.cpp's nemotron needs"),
        ("nemotron", {"attention_bias": True}, r"config attention_bias = True"),
        ("falcon", {}, r"model_type 'falcon' \(falcon\) is not written"),
        ("qwen2moe", {"tie_word_embeddings": True}, r"tie_word_embeddings is true but llama.cpp's qwen2moe needs"),
        ("qwen3moe", {"norm_topk_prob": False}, r"config norm_topk_prob = False .*renormalizes the top-k"),
        ("qwen2", {"use_sliding_window": True}, r"config use_sliding_window = True"),
        ("gemma3", {"query_pre_attn_scalar": 256}, r"query_pre_attn_scalar = 256 differs from head_dim = 32"),
        (
            "gemma2",
            {"num_hidden_layers": 46},
            r"query_pre_attn_scalar = 32 differs from hidden_size / num_attention_heads \(46-layer 27B\) = 16",
        ),
        ("gemma3", {"layer_types": ["full_attention", "sliding_attention"]}, r"every 6th layer only"),
        ("stablelm", {"qk_layernorm": True}, r"config qk_layernorm = True"),
        ("phi3", {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, r"rope type 'longrope'"),
        ("qwen3", {"architectures": ["Qwen3ForSequenceClassification"]}, r"holds Qwen3ForCausalLM \(the causal LM\)"),
    ],
)
def test_refusals_name_the_field(tmp_path: Path, key: str, change: dict, message: str) -> None:
    record = architecture_record(key)
    config = {**BASE, "model_type": record.model_type, "architectures": [record.hf_class], **CONFIGS.get(key, {})}
    config.update(change)
    with pytest.raises(GGUFFileError, match=message):
        writable_record(config)
    with pytest.raises(GGUFFileError, match=message):
        write_model_gguf(tmp_path / "x.gguf", config, [], _tokenizer(40))
    assert not (tmp_path / "x.gguf").exists()


def test_stablelm_flags_decide_the_expected_tensors(tmp_path: Path) -> None:
    """Without q/k/v biases and with a parallel residual, those tensors are not expected (and refused if given)."""
    config = {**_config("stablelm"), "use_qkv_bias": False, "use_parallel_residual": True}
    sd = _state_dict(config, "stablelm")
    assert not any(n.endswith(("q_proj.bias", "post_attention_layernorm.weight")) for n in sd)
    write_model_gguf(tmp_path / "s.gguf", config, sd.items(), _tokenizer(40), qtype="F32")
    back = read_gguf(tmp_path / "s.gguf")
    assert back.config["use_qkv_bias"] is False and back.config["use_parallel_residual"] is True
    extra = [*sd.items(), ("model.layers.0.self_attn.q_proj.bias", np.zeros(64, np.float32))]
    with pytest.raises(GGUFFileError, match=r"q_proj.bias.*no llama.cpp tensor for it in a stablelm .gguf"):
        write_model_gguf(tmp_path / "t.gguf", config, extra, _tokenizer(40))


def test_gemma_27b_attention_scale_is_written() -> None:
    """llama.cpp scales the 27B models (46 / 62 layers) by 1/sqrt(hidden / heads): that scale is accepted."""
    for key, layers in (("gemma2", 46), ("gemma3", 62)):
        config = {**_config(key), "num_hidden_layers": layers, "query_pre_attn_scalar": 16}
        config.pop("layer_types", None)
        assert writable_record(config).key == key
