"""``lowbit eval`` (quantized and dense) and ``lowbit bench`` through the command's main()."""

from __future__ import annotations

import json
import math
from pathlib import Path

from conftest import run_lowbit


def test_eval_quantized_and_dense_on_the_same_text(quantized: Path, tiny_llama: Path) -> None:
    args = ["--window", "32", "--max-windows", "3", "--max-new-tokens", "4", "--json"]
    q = run_lowbit("eval", str(quantized), *args)
    assert q.returncode == 0, q.stderr
    quant = json.loads(q.stdout)
    d = run_lowbit("eval", str(tiny_llama), *args)
    assert d.returncode == 0, d.stderr
    dense = json.loads(d.stdout)
    assert (quant["kind"], dense["kind"]) == ("quantized", "dense")
    assert quant["tokens"] == dense["tokens"] == 3 * 31 and quant["windows"] == 3
    assert quant["bos"] is dense["bos"] is False  # the tiny tokenizer prepends no BOS, so neither do the windows
    assert math.isfinite(quant["perplexity"]) and quant["perplexity"] > 1.0
    assert quant["perplexity"] != dense["perplexity"]
    assert abs(math.log(quant["perplexity"] / dense["perplexity"])) < 1.0
    assert isinstance(quant["generation"], str) and quant["backends"] != "-"


def test_eval_text_file_and_missing_path(quantized: Path, tmp_path: Path) -> None:
    text = tmp_path / "eval.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    result = run_lowbit("eval", str(quantized), "--text", str(text), "--window", "64", "--max-new-tokens", "0")
    assert result.returncode == 0, result.stderr
    assert f"text         {text}" in result.stdout and "generation" not in result.stdout
    assert "BOS" not in result.stdout
    missing = run_lowbit("eval", str(tmp_path / "nothing"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr


def test_bench_explains_the_selection_and_times_against_dense() -> None:
    result = run_lowbit(
        "bench", "--in-features", "256", "--out-features", "256", "--group-size", "64", "--tokens", "1,4",
        "--repeat", "2", "--json",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["selection"].startswith("selected ")
    chosen = report["selection"].split("'")[1]
    rows = {(r["backend"], r["tokens"]) for r in report["results"]}
    assert {("dense", 1), ("dense", 4), (chosen, 1), (chosen, 4), ("torch", 1)} <= rows
    for row in report["results"]:
        assert row["ms"] > 0
        if row["backend"] != "dense":
            assert row["max_abs_diff"] < 1e-3, row
