""".gguf architectures beyond llama: names, config, per-architecture conversions and refusals, on tiny files
written here with qformats' writer (F32 tensors, so every expected value is exact)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from qformats.gguf_file import KNOWN_ARCHITECTURES, GGUFFileError, read_gguf, write_gguf
from qformats.gguf_file.architecture_table import ARCHITECTURES

H, HEADS, KV, HEAD_DIM, INTER, VOCAB = 16, 2, 1, 8, 24, 12
RNG = np.random.default_rng(0)


def _w(*shape: int) -> np.ndarray:
    """Values on a 1/64 grid below 4: ``w + 1`` and ``(w + 1) - 1`` are exact in float32."""
    return (RNG.integers(-128, 128, size=shape) / 64).astype(np.float32)


def _meta(arch: str, **extra: object) -> dict[str, object]:
    return {
        "general.architecture": arch,
        "general.name": f"tiny {arch}",
        f"{arch}.block_count": 2,
        f"{arch}.embedding_length": H,
        f"{arch}.feed_forward_length": INTER,
        f"{arch}.attention.head_count": HEADS,
        f"{arch}.attention.head_count_kv": KV,
        f"{arch}.context_length": 64,
        f"{arch}.rope.freq_base": 5000.0,
        "tokenizer.ggml.tokens": [f"t{i}" for i in range(VOCAB)],
        "tokenizer.ggml.bos_token_id": 2,
        **{k if k.startswith(("general.", "tokenizer.")) else f"{arch}.{k}": v for k, v in extra.items()},
    }


def _attention(q_rows: int = HEADS * HEAD_DIM, kv_rows: int = KV * HEAD_DIM) -> dict[str, np.ndarray]:
    return {
        "attn_q.weight": _w(q_rows, H),
        "attn_k.weight": _w(kv_rows, H),
        "attn_v.weight": _w(kv_rows, H),
        "attn_output.weight": _w(H, q_rows),
    }


def _write(
    tmp_path: Path, meta: dict[str, object], layer: dict[str, np.ndarray], top: dict[str, np.ndarray], layers: int = 2
) -> tuple[Path, dict[str, np.ndarray]]:
    tensors = {"token_embd.weight": _w(VOCAB, H), "output_norm.weight": _w(H), **top}
    for index in range(layers):
        tensors.update({f"blk.{index}.{name}": value for name, value in layer.items()})
    path = tmp_path / "tiny.gguf"
    write_gguf(path, meta, tensors)  # type: ignore[arg-type]
    return path, tensors


def test_every_record_is_found_by_its_architecture_and_unknown_ones_are_refused_by_name(tmp_path: Path) -> None:
    assert KNOWN_ARCHITECTURES == tuple(sorted({r.gguf for r in ARCHITECTURES}))
    for must in (
        "llama",
        "qwen2",
        "qwen2moe",
        "qwen3",
        "qwen3moe",
        "phi3",
        "gemma2",
        "gemma3",
        "starcoder2",
        "stablelm",
        "nemotron",
        "falcon",
    ):
        assert must in KNOWN_ARCHITECTURES
    assert len({r.key for r in ARCHITECTURES}) == len(ARCHITECTURES)
    path, _ = _write(tmp_path, _meta("gpt2"), {}, {})
    with pytest.raises(
        GGUFFileError,
        match=r"tiny.gguf: general.architecture 'gpt2' is not read .*known "
        r"architectures: falcon, gemma2, gemma3, llama, nemotron, phi3, qwen2, qwen2moe, qwen3",
    ):
        read_gguf(path)
    write_gguf(path, {"general.name": "x"}, {})
    with pytest.raises(GGUFFileError, match=r"general.architecture: expected a string .*found None"):
        read_gguf(path)


def test_gemma3_names_norm_offset_head_dim_and_tied_embeddings(tmp_path: Path) -> None:
    norms = ["attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"]
    layer = {
        **_attention(),
        **{f"{n}.weight": _w(H) for n in norms},
        "attn_q_norm.weight": _w(HEAD_DIM),
        "attn_k_norm.weight": _w(HEAD_DIM),
        "ffn_gate.weight": _w(INTER, H),
        "ffn_up.weight": _w(INTER, H),
        "ffn_down.weight": _w(H, INTER),
    }
    meta = _meta(
        "gemma3",
        **{"attention.key_length": HEAD_DIM, "attention.sliding_window": 32, "attention.layer_norm_rms_epsilon": 1e-6},
    )
    path, stored = _write(tmp_path, meta, layer, {})
    model = read_gguf(path)
    cfg = model.config
    assert (cfg["model_type"], cfg["architectures"]) == ("gemma3_text", ["Gemma3ForCausalLM"])
    assert (cfg["head_dim"], cfg["sliding_window"], cfg["tie_word_embeddings"], cfg["vocab_size"]) == (8, 32, True, 12)
    assert cfg["rope_theta"] == 5000.0 and cfg["num_key_value_heads"] == 1 and cfg["bos_token_id"] == 2
    assert cfg["query_pre_attn_scalar"] == HEAD_DIM  # llama.cpp's 1/sqrt(head_dim) (transformers would keep 256)
    prefix = "model.layers.1."
    expected = {
        "input_layernorm.weight": "attn_norm.weight",
        "post_attention_layernorm.weight": "post_attention_norm.weight",
        "pre_feedforward_layernorm.weight": "ffn_norm.weight",
        "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
        "self_attn.q_norm.weight": "attn_q_norm.weight",
        "self_attn.k_norm.weight": "attn_k_norm.weight",
    }
    for hf, gguf in expected.items():  # stored as 1 + w by llama.cpp: read back as w
        assert np.array_equal(model.tensor(prefix + hf), stored[f"blk.1.{gguf}"] - 1), hf
    assert np.array_equal(model.tensor("model.norm.weight"), stored["output_norm.weight"] - 1)
    for hf, gguf in (("self_attn.q_proj.weight", "attn_q.weight"), ("mlp.down_proj.weight", "ffn_down.weight")):
        assert np.array_equal(model.tensor(prefix + hf), stored[f"blk.1.{gguf}"]), hf  # no rotary permutation
    assert np.array_equal(model.tensor("model.embed_tokens.weight"), stored["token_embd.weight"])
    assert len(model.names) == 2 + 2 * len(layer) and "lm_head.weight" not in model.names


def test_gemma2_reads_softcapping_and_has_no_qk_norm(tmp_path: Path) -> None:
    layer = {
        **_attention(),
        **{f"{n}.weight": _w(H) for n in ("attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm")},
        "ffn_gate.weight": _w(INTER, H),
        "ffn_up.weight": _w(INTER, H),
        "ffn_down.weight": _w(H, INTER),
    }
    meta = _meta("gemma2", attn_logit_softcapping=50.0, final_logit_softcapping=30.0, **{"attention.key_length": 8})
    path, stored = _write(tmp_path, meta, layer, {"output.weight": _w(VOCAB, H)})
    model = read_gguf(path)
    cfg = model.config
    assert (cfg["model_type"], cfg["attn_logit_softcapping"], cfg["final_logit_softcapping"]) == ("gemma2", 50.0, 30.0)
    assert cfg["tie_word_embeddings"] is False and np.array_equal(
        model.tensor("lm_head.weight"), stored["output.weight"]
    )
    assert np.array_equal(model.tensor("model.layers.0.input_layernorm.weight"), stored["blk.0.attn_norm.weight"] - 1)


def test_qwen2_biases_without_permutation(tmp_path: Path) -> None:
    layer = {
        **_attention(),
        "attn_q.bias": _w(HEADS * HEAD_DIM),
        "attn_k.bias": _w(HEAD_DIM),
        "attn_v.bias": _w(HEAD_DIM),
        "attn_norm.weight": _w(H),
        "ffn_norm.weight": _w(H),
        "ffn_gate.weight": _w(INTER, H),
        "ffn_up.weight": _w(INTER, H),
        "ffn_down.weight": _w(H, INTER),
    }
    path, stored = _write(tmp_path, _meta("qwen2", **{"attention.layer_norm_rms_epsilon": 1e-6}), layer, {})
    model = read_gguf(path)
    assert model.config["model_type"] == "qwen2" and model.config["rms_norm_eps"] == pytest.approx(1e-6)
    for hf, gguf in (
        ("self_attn.q_proj.weight", "attn_q.weight"),
        ("self_attn.k_proj.weight", "attn_k.weight"),
        ("self_attn.k_proj.bias", "attn_k.bias"),
        ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ):
        assert np.array_equal(model.tensor(f"model.layers.0.{hf}"), stored[f"blk.0.{gguf}"]), hf


def test_qwen3_qk_norm_and_head_dim_from_key_length(tmp_path: Path) -> None:
    layer = {
        **_attention(HEADS * 12, KV * 12),
        "attn_q_norm.weight": _w(12),
        "attn_k_norm.weight": _w(12),
        "attn_norm.weight": _w(H),
        "ffn_norm.weight": _w(H),
        "ffn_gate.weight": _w(INTER, H),
        "ffn_up.weight": _w(INTER, H),
        "ffn_down.weight": _w(H, INTER),
    }
    path, stored = _write(tmp_path, _meta("qwen3", **{"attention.key_length": 12}), layer, {})
    model = read_gguf(path)
    assert (model.config["model_type"], model.config["head_dim"]) == ("qwen3", 12)
    assert np.array_equal(model.tensor("model.layers.1.self_attn.q_norm.weight"), stored["blk.1.attn_q_norm.weight"])


def _moe_layer(shared: bool) -> dict[str, np.ndarray]:
    experts, moe_inter = 3, 4
    layer = {
        **_attention(),
        "attn_norm.weight": _w(H),
        "ffn_norm.weight": _w(H),
        "ffn_gate_inp.weight": _w(experts, H),
        "ffn_gate_exps.weight": _w(experts, moe_inter, H),
        "ffn_up_exps.weight": _w(experts, moe_inter, H),
        "ffn_down_exps.weight": _w(experts, H, moe_inter),
    }
    if shared:
        layer.update(
            {
                "ffn_gate_inp_shexp.weight": _w(H),
                "ffn_gate_shexp.weight": _w(6, H),
                "ffn_up_shexp.weight": _w(6, H),
                "ffn_down_shexp.weight": _w(H, 6),
            }
        )
    return layer


def test_qwen2moe_experts_stacked_gate_first_and_shared_gate_as_a_row(tmp_path: Path) -> None:
    meta = _meta(
        "qwen2moe",
        expert_count=3,
        expert_used_count=2,
        expert_feed_forward_length=4,
        expert_shared_feed_forward_length=6,
    )
    path, stored = _write(tmp_path, meta, _moe_layer(shared=True), {})
    model = read_gguf(path)
    cfg = model.config
    assert (cfg["model_type"], cfg["num_experts"], cfg["num_experts_per_tok"]) == ("qwen2_moe", 3, 2)
    assert (cfg["moe_intermediate_size"], cfg["shared_expert_intermediate_size"]) == (4, 6)
    name = "model.layers.0.mlp.experts.gate_up_proj"
    assert model.names[name] == ("blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight")
    assert model.shape(name) == (3, 8, H)  # from the headers, before decoding
    fused = model.tensor(name)
    assert fused.shape == (3, 8, H)
    assert np.array_equal(fused[:, :4], stored["blk.0.ffn_gate_exps.weight"])
    assert np.array_equal(fused[:, 4:], stored["blk.0.ffn_up_exps.weight"])
    assert np.array_equal(model.tensor("model.layers.0.mlp.experts.down_proj"), stored["blk.0.ffn_down_exps.weight"])
    gate = model.tensor("model.layers.0.mlp.shared_expert_gate.weight")
    assert gate.shape == model.shape("model.layers.0.mlp.shared_expert_gate.weight") == (1, H)
    assert np.array_equal(gate[0], stored["blk.0.ffn_gate_inp_shexp.weight"])
    assert np.array_equal(model.tensor("model.layers.0.mlp.gate.weight"), stored["blk.0.ffn_gate_inp.weight"])


def test_qwen3moe_defaults_norm_topk_prob(tmp_path: Path) -> None:
    layer = {**_moe_layer(shared=False), "attn_q_norm.weight": _w(HEAD_DIM), "attn_k_norm.weight": _w(HEAD_DIM)}
    path, _ = _write(
        tmp_path,
        _meta("qwen3moe", expert_count=3, expert_used_count=1, **{"attention.key_length": HEAD_DIM}),
        layer,
        {},
    )
    cfg = read_gguf(path).config
    assert (cfg["model_type"], cfg["norm_topk_prob"], cfg["head_dim"]) == ("qwen3_moe", True, HEAD_DIM)


def test_mistral_is_a_llama_file_named_mistral(tmp_path: Path) -> None:
    layer = {
        **_attention(),
        "attn_norm.weight": _w(H),
        "ffn_norm.weight": _w(H),
        "ffn_gate.weight": _w(INTER, H),
        "ffn_up.weight": _w(INTER, H),
        "ffn_down.weight": _w(H, INTER),
    }
    path, stored = _write(tmp_path, _meta("llama", **{"general.name": "mistral"}), layer, {})
    model = read_gguf(path)
    assert (model.architecture.key, model.config["architectures"]) == ("mistral", ["MistralForCausalLM"])
    q = stored["blk.0.attn_q.weight"]  # llama.cpp's rotary order is undone as for llama
    expected = q.reshape(HEADS, HEAD_DIM // 2, 2, H).swapaxes(1, 2).reshape(q.shape)
    assert np.array_equal(model.tensor("model.layers.0.self_attn.q_proj.weight"), expected)
    path, _ = _write(tmp_path, _meta("llama", **{"general.name": "Mistral 7B"}), layer, {})
    assert read_gguf(path).config["model_type"] == "llama"


def test_phi3_fused_qkv_and_gate_up(tmp_path: Path) -> None:
    layer = {
        "attn_norm.weight": _w(H),
        "ffn_norm.weight": _w(H),
        "attn_qkv.weight": _w(3 * H, H),
        "attn_output.weight": _w(H, H),
        "ffn_up.weight": _w(2 * INTER, H),
        "ffn_down.weight": _w(H, INTER),
    }
    path, stored = _write(tmp_path, _meta("phi3"), layer, {"output.weight": _w(VOCAB, H)})
    model = read_gguf(path)
    assert model.config["model_type"] == "phi3"
    assert np.array_equal(model.tensor("model.layers.0.self_attn.qkv_proj.weight"), stored["blk.0.attn_qkv.weight"])
    assert np.array_equal(model.tensor("model.layers.1.mlp.gate_up_proj.weight"), stored["blk.1.ffn_up.weight"])


@pytest.mark.parametrize(("arch", "layers", "scalar"), [("gemma2", 46, H // HEADS), ("gemma3", 62, H // HEADS),
                                                        ("gemma2", 3, 4), ("gemma3", 4, 4)])  # fmt: skip
def test_gemma_attention_scale_follows_llama_cpp_27b_rule(tmp_path: Path, arch: str, layers: int, scalar: int) -> None:
    """llama.cpp scales by 1/sqrt(hidden / heads) for the 27B models (46 / 62 layers), else 1/sqrt(head_dim)."""
    norms = ["attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm"]
    layer = {**_attention(2 * 4, 4), **{f"{n}.weight": _w(H) for n in norms}, "ffn_gate.weight": _w(INTER, H),
             "ffn_up.weight": _w(INTER, H), "ffn_down.weight": _w(H, INTER)}  # fmt: skip
    if arch == "gemma3":
        layer.update({"attn_q_norm.weight": _w(4), "attn_k_norm.weight": _w(4)})
    meta = _meta(arch, **{"block_count": layers, "attention.key_length": 4, "attention.layer_norm_rms_epsilon": 1e-6})
    path, _ = _write(tmp_path, meta, layer, {}, layers=layers)
    assert read_gguf(path).config["query_pre_attn_scalar"] == scalar


def _phi3_layer() -> dict[str, np.ndarray]:
    return {
        "attn_norm.weight": _w(H),
        "ffn_norm.weight": _w(H),
        "attn_qkv.weight": _w(3 * H, H),
        "attn_output.weight": _w(H, H),
        "ffn_up.weight": _w(2 * INTER, H),
        "ffn_down.weight": _w(H, INTER),
    }


def test_phi3_longrope_factors_and_partial_rotary_into_the_config(tmp_path: Path) -> None:
    long_f, short_f = np.array([1.0, 2.5], np.float32), np.array([1.0, 1.25], np.float32)
    meta = _meta("phi3", **{"rope.dimension_count": 4, "rope.scaling.original_context_length": 16,
                            "rope.scaling.attn_factor": 1.25})  # fmt: skip
    top = {"rope_factors_long.weight": long_f, "rope_factors_short.weight": short_f}
    path, _ = _write(tmp_path, meta, _phi3_layer(), top)
    model = read_gguf(path)
    cfg = model.config
    assert cfg["partial_rotary_factor"] == 0.5 and cfg["original_max_position_embeddings"] == 16
    assert cfg["rope_scaling"] == {"rope_type": "longrope", "long_factor": [1.0, 2.5], "short_factor": [1.0, 1.25],
                                   "attention_factor": 1.25}  # fmt: skip
    assert sorted(model.skipped) == sorted(top) and not any("rope" in name for name in model.names)
    path, _ = _write(tmp_path, _meta("phi3", **{"rope.dimension_count": HEAD_DIM}), _phi3_layer(), {})
    assert "partial_rotary_factor" not in read_gguf(path).config and "rope_scaling" not in read_gguf(path).config


@pytest.mark.parametrize(
    ("meta", "top", "error"),
    [
        ({"rope.scaling.original_context_length": 16}, {"rope_factors_long.weight": np.ones(4, np.float32)},
         r"LongRoPE needs both rope_factors_long.weight and rope_factors_short.weight; the file holds only "
         r"rope_factors_long"),
        ({}, {"rope_factors_long.weight": np.ones(4, np.float32), "rope_factors_short.weight": np.ones(4, np.float32)},
         r"phi3.rope.scaling.original_context_length: expected a positive integer .*found None"),
        ({"rope.scaling.original_context_length": 16},
         {"rope_factors_long.weight": np.ones(3, np.float32), "rope_factors_short.weight": np.ones(4, np.float32)},
         r"'rope_factors_long.weight': expected 4 finite rope factors \(rotary dims 8 / 2\), found shape \(3,\)"),
        ({"rope.dimension_count": 12}, {}, r"phi3.rope.dimension_count: expected an even count in 2..8"),
    ],
)  # fmt: skip
def test_phi3_bad_rope_settings_are_refused_by_name(tmp_path: Path, meta: dict, top: dict, error: str) -> None:
    path, _ = _write(tmp_path, _meta("phi3", **meta), _phi3_layer(), top)
    with pytest.raises(GGUFFileError, match=error):
        read_gguf(path)


def test_starcoder2_layernorm_biases_and_mlp_names(tmp_path: Path) -> None:
    layer = {
        **_attention(),
        **{
            f"{n}.bias": _w(r)
            for n, r in (
                ("attn_q", 16),
                ("attn_k", 8),
                ("attn_v", 8),
                ("attn_output", H),
                ("ffn_up", INTER),
                ("ffn_down", H),
                ("attn_norm", H),
                ("ffn_norm", H),
            )
        },
        "attn_norm.weight": _w(H),
        "ffn_norm.weight": _w(H),
        "ffn_up.weight": _w(INTER, H),
        "ffn_down.weight": _w(H, INTER),
    }
    path, stored = _write(
        tmp_path, _meta("starcoder2", **{"attention.layer_norm_epsilon": 1e-5}), layer, {"output_norm.bias": _w(H)}
    )
    model = read_gguf(path)
    assert model.config["norm_epsilon"] == pytest.approx(1e-5) and model.config["rope_theta"] == 5000.0
    assert np.array_equal(model.tensor("model.layers.0.mlp.c_fc.bias"), stored["blk.0.ffn_up.bias"])
    assert np.array_equal(model.tensor("model.layers.0.mlp.c_proj.weight"), stored["blk.0.ffn_down.weight"])
    assert np.array_equal(model.tensor("model.norm.bias"), stored["output_norm.bias"])


@pytest.mark.parametrize(("with_bias", "with_ffn_norm"), [(True, False), (False, True)])
def test_stablelm_flags_follow_the_tensors_present(tmp_path: Path, with_bias: bool, with_ffn_norm: bool) -> None:
    layer = {
        **_attention(),
        "attn_norm.weight": _w(H),
        "attn_norm.bias": _w(H),
        "ffn_gate.weight": _w(INTER, H),
        "ffn_up.weight": _w(INTER, H),
        "ffn_down.weight": _w(H, INTER),
    }
    if with_bias:
        layer.update({"attn_q.bias": _w(16), "attn_k.bias": _w(8), "attn_v.bias": _w(8)})
    if with_ffn_norm:
        layer.update({"ffn_norm.weight": _w(H), "ffn_norm.bias": _w(H)})
    path, _ = _write(tmp_path, _meta("stablelm"), layer, {"output_norm.bias": _w(H)})
    cfg = read_gguf(path).config
    assert (cfg["use_qkv_bias"], cfg["use_parallel_residual"]) == (with_bias, not with_ffn_norm)


def test_nemotron_offsets_norm_weights_not_biases(tmp_path: Path) -> None:
    layer = {
        **_attention(),
        "attn_norm.weight": _w(H),
        "attn_norm.bias": _w(H),
        "ffn_norm.weight": _w(H),
        "ffn_norm.bias": _w(H),
        "ffn_up.weight": _w(INTER, H),
        "ffn_down.weight": _w(H, INTER),
    }
    path, stored = _write(
        tmp_path, _meta("nemotron", **{"attention.layer_norm_rms_epsilon": 1e-5}), layer, {"output_norm.bias": _w(H)}
    )
    model = read_gguf(path)
    assert model.config["norm_eps"] == pytest.approx(1e-5)
    assert np.array_equal(model.tensor("model.layers.0.input_layernorm.weight"), stored["blk.0.attn_norm.weight"] - 1)
    assert np.array_equal(model.tensor("model.layers.0.input_layernorm.bias"), stored["blk.0.attn_norm.bias"])
    assert np.array_equal(model.tensor("model.norm.weight"), stored["output_norm.weight"] - 1)


def _qwen2_layer() -> dict[str, np.ndarray]:
    return {
        **_attention(),
        "attn_norm.weight": _w(H),
        "ffn_norm.weight": _w(H),
        "ffn_gate.weight": _w(INTER, H),
        "ffn_up.weight": _w(INTER, H),
        "ffn_down.weight": _w(H, INTER),
    }


def test_bad_files_are_refused_naming_the_tensor_or_key(tmp_path: Path) -> None:
    path, _ = _write(tmp_path, _meta("qwen2"), {**_qwen2_layer(), "attn_qkv.weight": _w(32, H)}, {})
    with pytest.raises(
        GGUFFileError,
        match=r"2 tensor\(s\) have no Hugging Face parameter in the qwen2 mapping: "
        r"blk.0.attn_qkv.weight, blk.1.attn_qkv.weight",
    ):
        read_gguf(path)
    path, _ = _write(tmp_path, _meta("qwen2"), _qwen2_layer(), {}, layers=3)
    with pytest.raises(GGUFFileError, match=r"tensor 'blk.2.attn_q.weight': layer 2 is outside the file's 2 layers"):
        read_gguf(path)
    path, tensors = _write(tmp_path, _meta("qwen2"), _qwen2_layer(), {})
    del tensors["blk.1.ffn_down.weight"]
    write_gguf(path, _meta("qwen2"), tensors)  # type: ignore[arg-type]
    with pytest.raises(
        GGUFFileError,
        match=r"layer 1 lacks 1 tensor\(s\) other layers hold: "
        r"model.layers.1.mlp.down_proj.weight",
    ):
        read_gguf(path)
    layer = _moe_layer(shared=False)
    del layer["ffn_up_exps.weight"]
    path, _ = _write(tmp_path, _meta("qwen3moe"), layer, {})
    with pytest.raises(
        GGUFFileError,
        match=r"'model.layers.0.mlp.experts.gate_up_proj' is read from "
        r"blk.0.ffn_gate_exps.weight, blk.0.ffn_up_exps.weight; the file lacks blk.0.ffn_up_exps",
    ):
        read_gguf(path)
    meta = _meta("qwen2")
    del meta["qwen2.embedding_length"]
    path, _ = _write(tmp_path, meta, _qwen2_layer(), {})
    with pytest.raises(
        GGUFFileError, match=r"qwen2 metadata lacks an integer for qwen2.embedding_length \(hidden_size\)"
    ):
        read_gguf(path)
    path, _ = _write(tmp_path, _meta("qwen2", **{"attention.head_count_kv": [1, 1]}), _qwen2_layer(), {})
    with pytest.raises(GGUFFileError, match=r"metadata 'qwen2.attention.head_count_kv': expected a single number"):
        read_gguf(path)
    path, _ = _write(tmp_path, _meta("llama", **{"attention.head_count": 3}), _qwen2_layer(), {})
    with pytest.raises(
        GGUFFileError,
        match=r"blk.0.attn_q.weight \(model.layers.0.self_attn.q_proj.weight\): "
        r"q/k projection with 16 rows cannot be split into 3 heads",
    ):
        read_gguf(path).tensor("model.layers.0.self_attn.q_proj.weight")


def _falcon_layer(kv: int = KV, two_norms: bool = False) -> dict[str, np.ndarray]:
    norms = {"attn_norm.weight": _w(H), "attn_norm.bias": _w(H)}
    if two_norms:
        norms.update({"attn_norm_2.weight": _w(H), "attn_norm_2.bias": _w(H)})
    return {
        **norms,
        "attn_qkv.weight": _w(H + 2 * kv * HEAD_DIM, H),
        "attn_output.weight": _w(H, H),
        "ffn_up.weight": _w(4 * H, H),
        "ffn_down.weight": _w(H, 4 * H),
    }


FALCON_META = _meta("falcon", **{"attention.layer_norm_epsilon": 1e-5, "feed_forward_length": 4 * H})


def test_falcon_multi_query_names(tmp_path: Path) -> None:
    top = {"output_norm.bias": _w(H), "output.weight": _w(VOCAB, H)}
    path, stored = _write(tmp_path, FALCON_META, _falcon_layer(), top)
    model = read_gguf(path)
    cfg = model.config
    assert model.architecture.key == "falcon" and "new_decoder_architecture" not in cfg
    assert (cfg["model_type"], cfg["ffn_hidden_size"], cfg["tie_word_embeddings"]) == ("falcon", 64, True)
    assert cfg["layer_norm_epsilon"] == pytest.approx(1e-5)
    qkv = model.tensor("transformer.h.1.self_attention.query_key_value.weight")
    assert np.array_equal(qkv, stored["blk.1.attn_qkv.weight"])  # multi-query: llama.cpp's order is HF's
    assert np.array_equal(model.tensor("transformer.word_embeddings.weight"), stored["token_embd.weight"])
    assert np.array_equal(model.tensor("transformer.ln_f.bias"), stored["output_norm.bias"])


def _grouped(stored: np.ndarray, heads: int, groups: int) -> np.ndarray:
    """Hugging Face's grouped rows from llama.cpp's (all q, all k, all v), head by head."""
    q, k, v = np.split(stored, [heads * HEAD_DIM, (heads + groups) * HEAD_DIM])
    per = heads // groups
    rows = []
    for g in range(groups):
        rows += [q[(g * per + i) * HEAD_DIM : (g * per + i + 1) * HEAD_DIM] for i in range(per)]
        rows += [k[g * HEAD_DIM : (g + 1) * HEAD_DIM], v[g * HEAD_DIM : (g + 1) * HEAD_DIM]]
    return np.concatenate(rows)


@pytest.mark.parametrize("two_norms", [False, True])
def test_grouped_kv_falcon_qkv_rows_regrouped_and_decoder_fields(tmp_path: Path, two_norms: bool) -> None:
    meta = {**FALCON_META, "falcon.attention.head_count_kv": 2}
    path, stored = _write(tmp_path, meta, _falcon_layer(kv=2, two_norms=two_norms), {"output_norm.bias": _w(H)})
    model = read_gguf(path)
    cfg = model.config
    assert model.architecture.key == ("falcon-2norm" if two_norms else "falcon")
    assert (cfg["new_decoder_architecture"], cfg["num_kv_heads"]) == (True, 2)
    assert cfg["num_ln_in_parallel_attn"] == (2 if two_norms else 1)
    qkv = model.tensor("transformer.h.0.self_attention.query_key_value.weight")
    assert np.array_equal(qkv, _grouped(stored["blk.0.attn_qkv.weight"], HEADS, 2))
    assert not np.array_equal(qkv, stored["blk.0.attn_qkv.weight"])
    if two_norms:  # llama.cpp's attn_norm feeds the MLP, attn_norm_2 the attention
        assert np.array_equal(model.tensor("transformer.h.1.ln_mlp.weight"), stored["blk.1.attn_norm.weight"])
        assert np.array_equal(model.tensor("transformer.h.1.ln_attn.bias"), stored["blk.1.attn_norm_2.bias"])
        assert "transformer.h.1.input_layernorm.weight" not in model.names
    else:
        assert np.array_equal(model.tensor("transformer.h.1.input_layernorm.weight"), stored["blk.1.attn_norm.weight"])
    # a multi-query file with two norms is the new decoder architecture with one group (rows as stored)
    path, stored = _write(tmp_path, FALCON_META, _falcon_layer(two_norms=True), {"output_norm.bias": _w(H)})
    model = read_gguf(path)
    assert (model.config["new_decoder_architecture"], model.config["num_kv_heads"]) == (True, 1)
    qkv = model.tensor("transformer.h.0.self_attention.query_key_value.weight")
    assert np.array_equal(qkv, stored["blk.0.attn_qkv.weight"])


def test_falcon_qkv_rows_that_do_not_split_into_the_heads_are_refused(tmp_path: Path) -> None:
    meta = {**FALCON_META, "falcon.attention.head_count_kv": 2}
    layer = {**_falcon_layer(kv=2), "attn_qkv.weight": _w(H + 2 * HEAD_DIM + 2, H)}
    path, _ = _write(tmp_path, meta, layer, {"output_norm.bias": _w(H)})
    with pytest.raises(GGUFFileError, match=r"blk.0.attn_qkv.weight .*fused QKV with 34 rows cannot hold 2 query "
                       r"heads in 2 KV groups"):  # fmt: skip
        read_gguf(path).tensor("transformer.h.0.self_attention.query_key_value.weight")


def test_architectures_transformers_maps_but_the_table_does_not_are_refused_with_the_reason(tmp_path: Path) -> None:
    from qformats.gguf_file.architecture_table import REFUSED_ARCHITECTURES

    assert not set(REFUSED_ARCHITECTURES) & set(KNOWN_ARCHITECTURES)
    path, _ = _write(tmp_path, _meta("gpt-oss"), {}, {})
    with pytest.raises(GGUFFileError, match=r"'gpt-oss' is not read as a Hugging Face model: not mapped yet \(MXFP4"):
        read_gguf(path)
    path, _ = _write(tmp_path, _meta("rwkv7"), {}, {})
    with pytest.raises(GGUFFileError, match=r"'rwkv7' is not read as a Hugging Face model; known architectures"):
        read_gguf(path)
