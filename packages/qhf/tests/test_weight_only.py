"""Whole-model weight-only runs (FP8, bitsandbytes NF4/FP4/int8, GGUF Q4_0/Q8_0 and the q4_k_m mixture): quantize,
save with the reference's config fields, verify, reload through qkernels' weight-only modules, evaluate perplexity."""

from __future__ import annotations

import json

import numpy as np
import pytest
import qhf
import torch
from qhf.checkpoint_config import checkpoint_dict
from qhf.checkpoint_reader import open_quantized_checkpoint
from qhf.config_view import gguf_dynamic, is_weight_only, needs_calibration, setting
from qhf.errors import QHFError
from qhf.quant_config import QuantConfigError, read_quantize_config
from safetensors.numpy import load_file

WINDOW = 32

#: (config, expected quantization_config fields, largest relative weight error, largest relative change of
#: perplexity against the dense model)
CASES = {
    "fp8-row": (
        {"method": "fp8"},
        {"bits": 8, "group_size": -1, "method": "fp8", "quant_method": "fp8", "format": "float8_e4m3fn",
         "checkpoint_format": "float8_e4m3fn", "weight_scale_method": "row", "weight_scale_semantics": "inverse"},
        0.05, 0.02,
    ),
    "fp8-block": (
        {"method": "fp8", "weight_block_size": [32, 32]},
        {"format": "float8_e4m3fn", "weight_scale_method": "block", "weight_block_size": [32, 32]},
        0.05, 0.02,
    ),
    "nf4": (
        {"method": "bitsandbytes", "format": "nf4"},
        {"bits": 4, "group_size": -1, "method": "bitsandbytes", "format": "nf4", "block_size": 64,
         "compress_statistics": True},
        0.15, 0.10,
    ),
    "int8": (
        {"method": "bitsandbytes", "bits": 8},
        {"bits": 8, "method": "bitsandbytes", "format": "int8"},
        0.02, 0.01,
    ),
    "gguf-q4_0": ({"method": "gguf", "bits": 4}, {"bits": 4, "method": "gguf", "format": "q_0"}, 0.15, 0.10),
    "gguf-q8_0": ({"method": "gguf", "bits": 8}, {"bits": 8, "method": "gguf", "format": "q_0"}, 0.02, 0.01),
}  # fmt: skip


@pytest.fixture(scope="module")
def llama(tiny_dirs):
    return tiny_dirs("llama")


@pytest.fixture(scope="module")
def dense_perplexity(llama) -> float:
    qm = qhf.load(llama, {"method": "rtn"})
    qm.source.materialize_base()
    for index in range(qm.source.num_layers):
        qm.source.materialize_layer(index)
    return float(qm.perplexity(window=WINDOW, max_windows=4).perplexity)


@pytest.mark.parametrize("case", list(CASES))
def test_quantize_save_reload_and_evaluate(case, llama, dense_perplexity, tmp_path) -> None:
    config, fields, weight_bound, ppl_bound = CASES[case]
    qm = qhf.load(llama, config)
    assert is_weight_only(qm.config) and not needs_calibration(qm.config)
    summary = qm.quantize()
    assert summary.calibration is None  # weight-only: no calibration built
    out = tmp_path / case
    summary = qm.save(out)
    assert summary.verified, summary.verification
    assert summary.verification["modules_checked"] == len(qm.results) == 14

    written = json.loads((out / "config.json").read_text())["quantization_config"]
    assert {k: written[k] for k in fields} == fields
    assert json.loads((out / "quantize_config.json").read_text()) == written
    if config["method"] == "gguf":  # the reference's GGUF config drops these
        assert not {"group_size", "desc_act", "pack_dtype"} & set(written)

    source = load_file(str(llama / "model.safetensors"))
    checkpoint = open_quantized_checkpoint(out)
    assert checkpoint.config == read_quantize_config(written)
    for name, result in qm.results.items():
        original = source[f"{name}.weight"]
        back = checkpoint.weight_only_logical(name, original.shape[1], original.shape[0])
        dequantized = np.asarray(back.dequantize(), dtype=np.float32).reshape(original.shape)
        assert np.array_equal(dequantized, np.asarray(result.weight.dequantize()).reshape(original.shape))
        relative = np.linalg.norm(dequantized - original) / np.linalg.norm(original)
        assert 0 < relative < weight_bound, f"{name}: relative weight error {relative:.4f}"

    lm = qhf.load_quantized(out)
    linears = [n for n, m in lm.model.named_modules() if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    assert linears == [], f"left dense: {linears}"
    assert len(lm.backends) == 14
    reloaded = float(qhf.evaluate(lm.model, lm.tokenizer, window=WINDOW, max_windows=4).perplexity)
    in_memory = float(qm.perplexity(window=WINDOW, max_windows=4).perplexity)
    assert reloaded == pytest.approx(in_memory, rel=1e-5)
    change = abs(reloaded - dense_perplexity) / dense_perplexity
    assert change < ppl_bound, f"perplexity {reloaded:.3f} vs dense {dense_perplexity:.3f}"


def test_fp8_tensors_have_the_reference_shapes(llama, tmp_path) -> None:
    qm = qhf.load(llama, {"method": "fp8", "weight_scale_method": "tensor"})
    qm.quantize()
    qm.save(tmp_path / "t")
    from safetensors.torch import load_file as load_torch

    tensors = load_torch(str(tmp_path / "t" / "model.safetensors"))
    name = "model.layers.0.mlp.down_proj"
    # stored as F8_E4M3, as the reference does (engines cast a uint8 tensor's values, not its bits)
    assert tensors[f"{name}.weight"].dtype == torch.float8_e4m3fn and tensors[f"{name}.weight"].shape == (64, 128)
    assert tensors[f"{name}.weight_scale_inv"].dtype == torch.float32
    assert tensors[f"{name}.weight_scale_inv"].shape == ()
    in_memory = qm.results[name].weight
    assert np.array_equal(tensors[f"{name}.weight"].view(torch.uint8).numpy(), np.asarray(in_memory.codes))


def test_fp8_block_that_does_not_divide_a_module_is_refused_before_work(llama) -> None:
    qm = qhf.load(llama, {"method": "fp8", "weight_block_size": [48, 48]})
    with pytest.raises(QHFError, match=r"model\.layers\.0\..*weight_block_size \[48, 48\] must divide"):
        qm.quantize()
    assert qm.results is None


def test_settings_follow_the_reference_fields_and_defaults() -> None:
    assert read_quantize_config({"method": "fp8"}).bits == 8
    bnb = read_quantize_config({"quant_method": "bitsandbytes", "bnb_quant_type": "nf4", "bnb_block_size": 128})
    assert (bnb.format, setting(bnb, "block_size"), bnb.bits) == ("nf4", 128, 4)
    assert read_quantize_config({"method": "bitsandbytes"}).format == "fp4"  # the reference's 4-bit default
    alias = read_quantize_config({"method": "gguf", "format": "q4_k_m"})
    assert (alias.bits, alias.format) == (4, "q_k_m")
    assert read_quantize_config({"method": "gguf", "bits": 8}).format == "q_0"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"method": "fp8", "bits": 4}, "bits: FP8 stores 8-bit weights"),
        ({"method": "gguf", "bits": 3}, "no default subtype for 3-bit"),
        ({"method": "bitsandbytes", "format": "nf4", "bits": 8}, "'nf4' does not store 8-bit"),
        ({"method": "fp8", "weight_scale_method": "block"}, "'block' needs weight_block_size"),
        ({"method": "fp8", "weight_scale_semantics": "multiplier"}, "weight_scale_semantics"),
        ({"method": "bitsandbytes", "block_size": 48}, "block_size: expected a power of two"),
    ],
)
def test_bad_weight_only_settings_name_the_field(config, message) -> None:
    with pytest.raises(QuantConfigError, match=message):
        read_quantize_config(config)


def test_q4_k_m_mixture_is_recorded_as_dynamic_overrides_and_loads_back(llama, tmp_path) -> None:
    """llama.cpp's q4_k_m rule on 2 layers: v_proj and down_proj of the last layer get Q6_K, the rest Q4_K."""
    qm = qhf.load(llama, {"method": "gguf", "format": "q4_k_m"})
    qm.quantize()
    summary = qm.save(tmp_path / "m")
    assert summary.verified, summary.verification
    written = json.loads((tmp_path / "m" / "config.json").read_text())["quantization_config"]
    assert (written["bits"], written["format"]) == (4, "q_k_m")
    assert written["dynamic"] == {
        r"+:^model\.layers\.1\.self_attn\.v_proj$": {"bits": 6, "format": "q_k"},
        r"+:^model\.layers\.1\.mlp\.down_proj$": {"bits": 6, "format": "q_k"},
    }
    tensors = load_file(str(tmp_path / "m" / "model.safetensors"))
    # one 256-element block per row (in 64 or 128, zero-padded): Q6_K 210 bytes, Q4_K 144 bytes
    assert tensors["model.layers.1.mlp.down_proj.qweight"].shape == (64, 210)
    assert tensors["model.layers.0.mlp.down_proj.qweight"].shape == (64, 144)
    assert tensors["model.layers.1.self_attn.q_proj.qweight"].shape[1] == 144
    checkpoint = open_quantized_checkpoint(tmp_path / "m")
    assert checkpoint.config == read_quantize_config(written) and gguf_dynamic(checkpoint.config) == written["dynamic"]
    assert checkpoint.weight_only_logical("model.layers.1.mlp.down_proj", 128, 64).qtype == "Q6_K"
    assert checkpoint.weight_only_logical("model.layers.0.mlp.down_proj", 128, 64).qtype == "Q4_K"

    pure = qhf.load(llama, {"method": "gguf", "format": "q4_k"})
    pure.quantize()
    upgraded = qm.run.report_for("model.layers.1.mlp.down_proj").loss
    assert upgraded < pure.run.report_for("model.layers.1.mlp.down_proj").loss  # Q6_K beats Q4_K
    lm = qhf.load_quantized(tmp_path / "m")
    reloaded = float(qhf.evaluate(lm.model, lm.tokenizer, window=WINDOW, max_windows=4).perplexity)
    assert reloaded == pytest.approx(float(qm.perplexity(window=WINDOW, max_windows=4).perplexity), rel=1e-5)


def test_gguf_dynamic_overrides_are_checked() -> None:
    ok = read_quantize_config(
        {"method": "gguf", "bits": 4, "format": "q_k", "dynamic": {"+:.*down_proj$": {"bits": 6, "format": "q_k"}}}
    )
    assert gguf_dynamic(ok) == {"+:.*down_proj$": {"bits": 6, "format": "q_k"}}
    assert checkpoint_dict(ok)["dynamic"] == gguf_dynamic(ok)
    with pytest.raises(QuantConfigError, match=r"dynamic\['\+:.\*down_proj\$'\]: .*'q7_k'"):
        read_quantize_config({"method": "gguf", "bits": 4, "dynamic": {"+:.*down_proj$": {"bits": 7, "format": "q_k"}}})
    with pytest.raises(QuantConfigError, match="names both bits and format"):
        read_quantize_config({"method": "gguf", "bits": 4, "dynamic": {".*down_proj$": {"bits": 6}}})
    with pytest.raises(QuantConfigError, match="no '-:' rules"):
        read_quantize_config({"method": "gguf", "bits": 4, "dynamic": {"-:.*down_proj$": {}}})
