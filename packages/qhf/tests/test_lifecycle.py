"""quantize -> save -> load_quantized -> logits, for every method and format, on tiny real architectures.

Three independent views of the same quantized model must agree: the in-memory model after ``quantize``,
the checkpoint reloaded with qkernels modules, and a plain transformers model loaded from the dense
export (dequantized weights in float32).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import qhf
import torch
from qhf.checkpoint_reader import open_quantized_checkpoint
from qhf.corpus import bundled_docs
from qhf.tokenizer import token_blocks

CASES = [  # every method, every GPTQ/AWQ format and every tiny architecture at least once
    ("llama", "gptq", "gptq"),
    ("llama", "gptq", "gptq_p"),
    ("llama", "rtn", "gptq"),
    ("llama", "awq", "gemm"),
    ("qwen2", "gptq", "gptq_v2"),
    ("mistral", "rtn", "gemm"),
]
PROBE = torch.tensor([[0, *range(5, 45)]])


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROBE, use_cache=False).logits.float()


@pytest.mark.parametrize(("model_type", "method", "fmt"), CASES)
def test_quantize_save_reload(tmp_path, tiny_dirs, model_type: str, method: str, fmt: str) -> None:
    from transformers import AutoModelForCausalLM

    src = tiny_dirs(model_type)
    qm = qhf.load(src, {"method": method, "bits": 4, "group_size": 32, "format": fmt, "sym": method != "awq"})
    blocks = token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=48)
    summary = qm.quantize(blocks)
    assert summary.modules == 2 * 7 and summary.method == method
    if method != "rtn":
        assert summary.calibration is not None
        assert summary.calibration.tokens == 4 * 48 and summary.calibration.rows == 4
    in_memory = _logits(qm.model)

    out = tmp_path / "q"
    saved = qm.save(out, max_shard_size="60KB")
    assert saved.verified and saved.verification["modules_checked"] == 14
    assert saved.saved is not None and saved.saved.shards > 1 and (out / "model.safetensors.index.json").is_file()
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"] == json.loads((out / "quantize_config.json").read_text())
    assert config["quantization_config"]["format"] == fmt
    assert (out / "tokenizer.json").is_file() and (out / "quant_log.csv").is_file()
    rows = json.loads((out / "quant_report.json").read_text())["modules"]
    assert len(rows) == 14 and all(r["loss"] is not None for r in rows)

    lm = qhf.load_quantized(out)
    assert len(lm.backends) == 14
    reloaded = _logits(lm)
    assert torch.allclose(reloaded, in_memory, atol=1e-4), float((reloaded - in_memory).abs().max())

    dense_dir = qm.export_dense(tmp_path / "dense", dtype=torch.float32)
    assert "quantization_config" not in json.loads((dense_dir / "config.json").read_text())
    dense = AutoModelForCausalLM.from_pretrained(dense_dir, dtype=torch.float32).eval()
    reference = _logits(dense)
    scale = float(reference.abs().max())
    assert float((reference - reloaded).abs().max()) <= 0.02 * scale

    original = _logits(AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval())
    assert not torch.allclose(original, reference, atol=1e-4)  # quantization changed the model
    cos = torch.nn.functional.cosine_similarity(original.flatten(), reference.flatten(), dim=0)
    assert float(cos) > 0.9

    # the exported weights are exactly the checkpoint's dequantized logical weights
    ckpt = open_quantized_checkpoint(out)
    name = "model.layers.1.mlp.down_proj"
    expected = ckpt.logical_weight(name, 128, 64).dequantize()
    assert np.array_equal(dense.get_submodule(name).weight.detach().numpy(), expected)

    text = lm.generate_text("def f", max_new_tokens=4)
    assert isinstance(text, str)


def test_save_before_quantize_and_twice(tmp_path, tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "rtn", "bits": 4, "group_size": 32})
    with pytest.raises(qhf.StateError, match="quantize"):
        qm.save(tmp_path / "x")
    qm.quantize()
    with pytest.raises(qhf.StateError, match="save"):
        qm.export_dense(tmp_path / "d")
    with pytest.raises(qhf.StateError, match="already quantized"):
        qm.quantize()


def test_verification_catches_a_corrupted_checkpoint(tmp_path, tiny_dirs) -> None:
    from qhf.verify import verify_checkpoint
    from safetensors.torch import load_file, save_file

    qm = qhf.load(tiny_dirs("llama"), {"method": "rtn", "bits": 4, "group_size": 32})
    qm.quantize()
    out = tmp_path / "q"
    qm.save(out)
    tensors = load_file(out / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.qweight"] ^= 1
    save_file(tensors, out / "model.safetensors", metadata={"format": "pt"})
    report = verify_checkpoint(out, qm.model, qm.results, qm.source.stored, qm.probe_ids())
    assert not report.passed
    assert any("q_proj" in p for p in report.problems)


def test_batched_calibration_with_a_tokenizer_that_cannot_pad(tiny_dirs) -> None:
    from tiny_models import build_tokenizer

    qm = qhf.load(tiny_dirs("llama"), {"method": "gptq"}, tokenizer=build_tokenizer(with_specials=False))
    with pytest.raises(qhf.TokenizerError, match="cannot pad"):
        qm.quantize(calibration=["some text " * 20, "more text " * 30], batch_size=2)


def test_batched_calibration_pads_with_eos_and_records_it(tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "gptq", "group_size": 32})
    summary = qm.quantize(calibration=["some text " * 20, "more text " * 30], batch_size=2)
    assert summary.tokenizer_note is not None and summary.calibration is not None
    assert "eos_token" in summary.tokenizer_note and summary.calibration.rows == 2


def test_bfloat16_source_keeps_its_dtype(tmp_path, tokenizer) -> None:
    from safetensors import safe_open
    from tiny_models import save_tiny_model

    src = save_tiny_model(tmp_path / "src", "llama", tokenizer=tokenizer, dtype=torch.bfloat16)
    qm = qhf.load(src, {"method": "rtn", "bits": 4, "group_size": 32})
    qm.quantize()
    qm.save(tmp_path / "q")
    with safe_open(str(tmp_path / "q" / "model.safetensors"), framework="pt") as f:
        assert f.get_tensor("model.norm.weight").dtype == torch.bfloat16
        assert f.get_tensor("model.embed_tokens.weight").dtype == torch.bfloat16
        assert f.get_tensor("model.layers.0.mlp.up_proj.scales").dtype == torch.float16


def test_default_calibration_needs_no_data(tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("qwen2"), {"method": "gptq", "group_size": 32})
    summary = qm.quantize(samples=4, length=32)
    assert summary.calibration is not None
    assert summary.calibration.rows == 2 * 4 and 0 < summary.calibration.tokens <= 2 * 4 * 32
    assert isinstance(summary.calibration_source, dict)


def test_awq_gemm_refuses_a_partial_group_before_any_work(tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "awq", "bits": 4, "group_size": 48, "format": "gemm"})
    with pytest.raises(qhf.QHFError, match=r"'gemm' cannot hold model\.layers\.0\.self_attn\.q_proj \[64 x 64\]"):
        qm.quantize(calibration=[[1, 2, 3] * 20])
    assert qm.results is None


def test_gptq_holds_a_partial_last_group(tmp_path, tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "rtn", "bits": 4, "group_size": 48})
    qm.quantize()
    summary = qm.save(tmp_path / "q")
    assert summary.verified
    weight = qm.results["model.layers.0.mlp.up_proj"].weight
    assert weight.num_groups == 2 and weight.in_features == 64


@pytest.mark.parametrize("method", ["rtn", "awq"])
def test_a_bfloat16_model_verifies_against_a_bfloat16_reload(tmp_path, tiny_dirs, method: str, monkeypatch) -> None:
    """Verify-after-save rebuilds the checkpoint in the model's compute dtype: a bfloat16 run is compared
    with a bfloat16 reload (a float32 reload differs by bfloat16 rounding, not by what was saved)."""
    import importlib

    loader = importlib.import_module("qhf.load_quantized")  # the module (qhf.load_quantized is the function)
    qm = qhf.load(tiny_dirs("llama"), {"method": method, "bits": 4, "group_size": 32}, dtype=torch.bfloat16)
    qm.quantize(calibration=None if method == "rtn" else ["some calibration text " * 40] * 2)
    shared_with_reload = []
    build = loader.build_quantized_model

    def spy(*args, **kwargs):
        shared_with_reload.append(kwargs["shared"]("model.embed_tokens.weight"))
        return build(*args, **kwargs)

    monkeypatch.setattr(loader, "build_quantized_model", spy)
    qm.save(tmp_path / "q")
    verification = qm.summary.verification
    assert isinstance(verification, dict) and verification["passed"], verification
    assert verification["max_logit_diff"] <= 1e-3
    # the bfloat16 embeddings, proved identical to the saved ones, are shared, not read a second time
    embed = qm.model.get_submodule("model.embed_tokens").weight
    assert [t.data_ptr() for t in shared_with_reload] == [embed.data_ptr()]


@pytest.mark.parametrize("export_dtype", [torch.float32, torch.bfloat16])
def test_dense_export_of_a_checkpoint_with_bfloat16_tensors(tmp_path, tiny_dirs, export_dtype) -> None:
    """bfloat16 tensors are copied as bfloat16 and dequantized weights written in the asked dtype (the
    export used to refuse a checkpoint whose dense tensors are bfloat16, such as the reference's AWQ)."""
    from safetensors import safe_open

    qm = qhf.load(tiny_dirs("llama"), {"method": "rtn", "bits": 4, "group_size": 32})
    qm.quantize()
    qm.save(tmp_path / "q", dtype="bfloat16")
    out = qhf.export_dense(tmp_path / "q", tmp_path / "dense", dtype=export_dtype)
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert f.get_tensor("model.embed_tokens.weight").dtype == torch.bfloat16
        assert f.get_tensor("model.layers.0.self_attn.q_proj.weight").dtype == export_dtype
