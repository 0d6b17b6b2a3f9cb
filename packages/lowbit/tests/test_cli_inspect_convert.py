"""``lowbit inspect`` and ``lowbit convert``: the command run in-process, and once through ``python -m lowbit``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from conftest import run_lowbit, run_lowbit_process

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_inspect_text_json_and_plot(quantized: Path, tmp_path: Path) -> None:
    text = run_lowbit("inspect", str(quantized))
    assert text.returncode == 0, text.stderr
    assert "method       gptq" in text.stdout and "violations   0" in text.stdout
    png = tmp_path / "codes.png"
    as_json = run_lowbit("inspect", str(quantized), "--json", "--plot", str(png), "--plot-modules", "2")
    assert as_json.returncode == 0, as_json.stderr
    summary = json.loads(as_json.stdout)
    assert len(summary["modules"]) == 14 and summary["violation_count"] == 0 and summary["bits"] == 4
    assert png.read_bytes()[:8] == PNG_MAGIC


def test_python_dash_m_lowbit_runs_a_command_and_returns_its_status(quantized: Path) -> None:
    # The other tests call the command in-process; this one goes through the interpreter's entry point.
    result = run_lowbit_process("inspect", str(quantized), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["violation_count"] == 0
    unknown = run_lowbit_process("frobnicate")
    assert unknown.returncode == 2 and "invalid choice: 'frobnicate'" in unknown.stderr


def test_inspect_gguf_counts_tensors_per_type(tmp_path: Path) -> None:
    from qformats.gguf_file import write_gguf

    path = tmp_path / "tiny.gguf"
    tensors = {"token_embd.weight": np.ones((8, 4), np.float32), "output_norm.weight": np.ones(4, np.float32)}
    write_gguf(path, {"general.architecture": "llama", "general.name": "tiny"}, tensors)
    result = run_lowbit("inspect", str(path), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["tensors"] == 2 and summary["metadata"]["general.name"] == "tiny"
    assert summary["types"]["F32"] == {"tensors": 2, "bytes": (32 + 4) * 4}
    assert "llama metadata lacks an integer for llama.embedding_length" in summary["hugging_face"]["error"]


def test_inspect_gguf_says_which_hugging_face_model_it_reads_as(tmp_path: Path) -> None:
    from qformats.gguf_file import write_gguf

    path = tmp_path / "tiny.gguf"
    meta = {"general.architecture": "gemma3", "gemma3.block_count": 0, "gemma3.embedding_length": 4,
            "gemma3.attention.head_count": 1}  # fmt: skip
    write_gguf(path, meta, {"token_embd.weight": np.ones((8, 4), np.float32)})
    text = run_lowbit("inspect", str(path))
    assert text.returncode == 0, text.stderr
    assert "reads as     Gemma3ForCausalLM (model_type gemma3_text; dense float32 source)" in text.stdout
    write_gguf(path, {"general.architecture": "mamba"}, {})
    text = run_lowbit("inspect", str(path))
    assert text.returncode == 0, text.stderr
    assert "reads as     no Hugging Face model: " in text.stdout and "'mamba' is not read" in text.stdout


def test_convert_of_a_gguf_file_says_to_quantize_it(tmp_path: Path) -> None:
    from qformats.gguf_file import write_gguf

    path = tmp_path / "tiny.gguf"
    write_gguf(path, {"general.architecture": "qwen3"}, {})
    result = run_lowbit("convert", str(path), "--to", "gptq_v2", "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "is a .gguf file, a dense source" in result.stderr
    assert "lowbit quantize" in result.stderr and not (tmp_path / "out").exists()


def test_inspect_refuses_other_files(tmp_path: Path) -> None:
    other = tmp_path / "weights.bin"
    other.write_bytes(b"\0" * 8)
    result = run_lowbit("inspect", str(other))
    assert result.returncode == 2 and "not a .gguf" in result.stderr


def _dense_weights(path: Path) -> dict[str, np.ndarray]:
    from qformats.checkpoint import open_checkpoint

    checkpoint = open_checkpoint(path)
    return {e.prefix: checkpoint.unpack(e).dequantize() for e in checkpoint.modules()}


def test_lossless_convert_keeps_every_weight_bit_exact(quantized: Path, tmp_path: Path) -> None:
    out = tmp_path / "v2"
    result = run_lowbit("convert", str(quantized), "--to", "gptq_v2", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "14 transcoded bit exactly, 0 requantized" in result.stdout
    assert json.loads((out / "quantize_config.json").read_text())["format"] == "gptq_v2"
    assert (out / "tokenizer.json").is_file()
    before, after = _dense_weights(quantized), _dense_weights(out)
    assert before.keys() == after.keys()
    for name in before:
        assert np.array_equal(before[name], after[name]), name


def test_lossy_convert_is_refused_then_done_only_when_allowed(quantized: Path, tmp_path: Path) -> None:
    refused = tmp_path / "refused"
    result = run_lowbit("convert", str(quantized), "--to", "gemm", "--out", str(refused))
    assert result.returncode == 2
    assert "cannot be stored in 'gemm' exactly" in result.stderr and "--allow-lossy" in result.stderr
    assert "model.layers.0.self_attn.q_proj" in result.stderr
    assert not refused.exists()
    out = tmp_path / "lossy"
    allowed = run_lowbit("convert", str(quantized), "--to", "gemm", "--out", str(out), "--allow-lossy")
    assert allowed.returncode == 0, allowed.stderr
    assert "requantized (lossy)" in allowed.stdout
    config = json.loads((out / "quantize_config.json").read_text())
    assert (config["method"], config["format"], config["desc_act"]) == ("awq", "gemm", False)
    before, after = _dense_weights(quantized), _dense_weights(out)
    for name in before:
        relative = np.linalg.norm(after[name] - before[name]) / np.linalg.norm(before[name])
        assert relative < 0.2, f"{name}: {relative:.3f}"
    assert any(not np.array_equal(before[n], after[n]) for n in before)


def test_lossy_convert_keeps_bfloat16_dense_tensors_bfloat16(
    tiny_llama: Path, calibration_text: Path, tmp_path: Path
) -> None:
    from qformats.checkpoint import open_checkpoint

    source = tmp_path / "bf16"
    quantized = run_lowbit(
        "quantize", str(tiny_llama), "--out", str(source), "--group-size", "32", "--desc-act", "--dtype", "bfloat16",
        "--calibration", str(calibration_text), "--samples", "2", "--length", "32", "--quiet",
    )  # fmt: skip
    assert quantized.returncode == 0, quantized.stderr
    out = tmp_path / "lossy"
    result = run_lowbit("convert", str(source), "--to", "gemm", "--out", str(out), "--allow-lossy")
    assert result.returncode == 0, result.stderr
    before, after = open_checkpoint(source), open_checkpoint(out)
    dense = before.dense_names()
    assert "model.embed_tokens.weight" in dense and before.stored_dtype("model.embed_tokens.weight") == "BF16"
    assert {n: after.stored_dtype(n) for n in dense} == {n: before.stored_dtype(n) for n in dense}


def test_convert_names_unknown_targets(quantized: Path, tmp_path: Path) -> None:
    result = run_lowbit("convert", str(quantized), "--to", "gptq_v9", "--out", str(tmp_path / "x"))
    assert result.returncode == 2 and "--to: expected one of" in result.stderr and "'gptq_v9'" in result.stderr
