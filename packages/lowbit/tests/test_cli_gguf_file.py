"""``--out x.gguf``: ``lowbit quantize`` and ``lowbit convert --to gguf-file`` write one llama .gguf file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import run_lowbit


def test_quantize_gguf_method_writes_one_file_that_reads_back(tiny_llama: Path, tmp_path: Path) -> None:
    from qformats.gguf_file import read_llama_gguf
    from safetensors.numpy import load_file

    out = tmp_path / "tiny-q4_0.gguf"
    result = run_lowbit("quantize", str(tiny_llama), "--method", "gguf", "--out", str(out), "--quiet")
    assert result.returncode == 0, result.stderr
    assert "14 gguf blocks carried, 0 requantized" in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny-q4_0.gguf"]  # the temporary directory is gone
    assert f"result       {out.resolve()}\n" in result.stdout and ".parts-" not in result.stdout
    assert "engines      loaded by 1 of" in result.stdout and "llama.cpp:gguf" in result.stdout
    back = read_llama_gguf(out)
    dense = load_file(str(tiny_llama / "model.safetensors"))
    assert sorted(back.names) == sorted(dense)
    linears = [info.type.name for n, info in back.reader.tensors.items() if n.startswith("blk.") and "norm" not in n]
    assert linears == ["Q4_0"] * 14
    q = back.tensor("model.layers.1.self_attn.q_proj.weight")  # q/k rows back in Hugging Face order
    reference = dense["model.layers.1.self_attn.q_proj.weight"]
    assert np.abs(q - reference).max() < 0.25 * np.abs(reference).max()
    assert back.reader.value("tokenizer.ggml.bos_token_id") == 0
    assert back.reader.value("general.name") == "tiny-q4_0"

    evaluated = run_lowbit("eval", str(out), "--window", "32", "--max-windows", "2", "--max-new-tokens", "0")
    assert evaluated.returncode == 0, evaluated.stderr


def test_convert_to_gguf_file_exact_and_refusals(tiny_llama: Path, tmp_path: Path) -> None:
    from qformats.checkpoint import open_checkpoint
    from qformats.gguf_file import read_llama_gguf

    rtn = tmp_path / "rtn"
    flags = ["--method", "rtn", "--group-size", "32", "--quiet"]
    result = run_lowbit("quantize", str(tiny_llama), *flags, "--out", str(rtn))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "rtn.gguf"
    converted = run_lowbit("convert", str(rtn), "--to", "gguf-file", "--out", str(out))
    assert converted.returncode == 0, converted.stderr
    assert "14 transcoded bit exactly" in converted.stdout
    checkpoint, back = open_checkpoint(rtn), read_llama_gguf(out)
    for entry in checkpoint.modules():
        assert np.array_equal(back.tensor(f"{entry.prefix}.weight"), checkpoint.dense(entry)), entry.prefix

    again = run_lowbit("convert", str(rtn), "--to", "gguf-file", "--out", str(out))
    assert again.returncode == 2 and "exists" in again.stderr
    not_gguf = run_lowbit("convert", str(rtn), "--to", "gguf-file", "--out", str(tmp_path / "x.bin"))
    assert not_gguf.returncode == 2 and "ending in .gguf" in not_gguf.stderr
    k_quant = run_lowbit("convert", str(tiny_llama), "--to", "gguf-file", "--out", str(tmp_path / "k.gguf"),
                         "--gguf-type", "Q4_K")  # fmt: skip
    assert k_quant.returncode != 0 and "not whole Q4_K blocks of 256" in k_quant.stderr
    assert not (tmp_path / "k.gguf").exists()
