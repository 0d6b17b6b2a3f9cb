"""``--preset best --target ENGINE``: EoRA adapters where the engine loads LoRA (vLLM), and ``best`` unchanged
without the adapter (tiny llama: hidden 64, intermediate 128)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_lowbit

BEST = ("--preset", "best", "--group-size", "32", "--dtype", "float16", "--samples", "8", "--length", "48", "--quiet")
#: The files of a checkpoint that hold what it computes (the report files carry timings).
MODEL_FILES = ("model.safetensors", "config.json", "quantize_config.json")


def test_best_for_vllm_writes_eora_adapters_and_says_how_to_serve_them(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    result = run_lowbit("quantize", str(tiny_llama), *BEST, "--target", "vllm:gptq", "--out", str(out))
    assert result.returncode == 0, result.stderr
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("adapter"))
    assert "EoRA rank 32 (--preset best for --target vllm:gptq" in line
    assert f"--enable-lora --max-lora-rank 32 --lora-modules eora={out / 'eora'}" in line
    assert json.loads((out / "quantize_config.json").read_text())["adapter"] == {
        "name": "lora",
        "path": "eora",
        "rank": 32,
    }
    peft = json.loads((out / "eora" / "adapter_config.json").read_text())
    assert peft["r"] == peft["lora_alpha"] == 32 and peft["peft_type"] == "LORA"
    assert (out / "eora" / "adapter_model.safetensors").stat().st_size > 0
    shown = run_lowbit("inspect", str(out), "--json")  # inspect reports the adapter and finds nothing wrong
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    assert summary["violation_count"] == 0
    assert summary["adapter"]["rank"] == 32 and summary["adapter"]["modules"] == len(summary["modules"]) > 0


def test_best_without_the_adapter_is_the_same_checkpoint_byte_for_byte(tiny_llama: Path, tmp_path: Path) -> None:
    plain, off = tmp_path / "plain", tmp_path / "off"
    first = run_lowbit("quantize", str(tiny_llama), *BEST, "--out", str(plain))
    second = run_lowbit(
        "quantize", str(tiny_llama), *BEST, "--target", "vllm:gptq", "--eora-rank", "0", "--out", str(off)
    )  # fmt: skip
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert not any(ln.startswith("adapter") for ln in first.stdout.splitlines() + second.stdout.splitlines())
    assert not (plain / "eora").exists() and not (off / "eora").exists()
    for name in MODEL_FILES:
        assert (plain / name).read_bytes() == (off / name).read_bytes(), name
