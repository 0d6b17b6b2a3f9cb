"""Every phase of a CLI run says what it does, with elapsed time and an estimate, as plain lines on a non-TTY stderr."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import run_lowbit


def _quantize(tiny_llama: Path, out: Path):
    return run_lowbit(
        "quantize", str(tiny_llama), "--out", str(out), "--method", "gptq", "--group-size", "32",
        "--samples", "96", "--length", "16",
    )  # fmt: skip


def test_quantize_prints_a_line_per_phase_and_reuses_the_cached_rows(tiny_llama: Path, tmp_path: Path) -> None:
    first = _quantize(tiny_llama, tmp_path / "a")
    assert first.returncode == 0, first.stderr
    err = first.stderr
    assert "\r" not in err  # lines, not a carriage-return bar: stderr is not a terminal here
    budget = re.search(r"calibration: generation budget: (\d+) of 96 self-generated rows fit 10%", err)
    assert budget is not None
    granted = int(budget.group(1))
    assert 0 < granted < 96
    announced = f"calibration: generating {granted} rows x 16 tokens ("
    assert announced in err and "decode steps; estimate after the first step)" in err
    assert err.index(announced) < err.index("calibration: first step took")  # said before it starts
    assert re.search(r"calibration: first step took [\d.]+s: estimate \d+s for the generation", err)
    assert re.search(rf"calibration: generating: {granted}/{granted} rows, step 15/15, elapsed [\d.]+s, eta", err)
    layers = re.findall(r"\] (\d)/2 layers  elapsed [\d.]+s  eta [\d.?]+s?", err)
    assert layers == ["1", "2"]
    assert "save: writing and verifying 14 quantized modules to" in err
    assert re.search(r"save: done, elapsed [\d.]+s", err)
    assert err.index("calibration: first step took") < err.index("1/2 layers") < err.index("save: writing")
    assert f"generation   {granted} of 96 requested self-generated rows (budget 10%)" in first.stdout
    assert "cache miss" in first.stdout

    second = _quantize(tiny_llama, tmp_path / "b")
    assert second.returncode == 0, second.stderr
    assert f"calibration: {granted} self-generated rows x 16 tokens from the cache (" in second.stderr
    assert "calibration: first step took" not in second.stderr and "cache hit" in second.stdout
    saved = [(tmp_path / d / "quant_log.csv").read_text() for d in ("a", "b")]
    assert saved[0].splitlines()[0] == saved[1].splitlines()[0]


def test_quiet_prints_no_progress(tiny_llama: Path, tmp_path: Path) -> None:
    result = run_lowbit(
        "quantize", str(tiny_llama), "--out", str(tmp_path / "q"), "--group-size", "32", "--samples", "2",
        "--length", "32", "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "calibration:" not in result.stderr and "layers  elapsed" not in result.stderr
    assert "save:" not in result.stderr


def test_quickstart_keeps_its_generated_rows_and_prints_the_phases(tiny_llama: Path, tmp_path: Path) -> None:
    args = ["--gguf-out", "none", "--samples", "2", "--length", "32", "--window", "32", "--eval-windows", "1"]
    result = run_lowbit("quickstart", "--model", str(tiny_llama), "--out", str(tmp_path / "r"), *args)
    assert result.returncode == 0, result.stderr
    assert "generation budget" not in result.stderr  # the quickstart keeps its rows: no budget
    assert "calibration: generating 2 rows x 32 tokens (" in result.stderr
    assert re.search(r"calibration: generating: 2/2 rows, step 31/31, elapsed [\d.]+s, eta", result.stderr)
    assert re.search(r"\] 2/2 layers  elapsed [\d.]+s  eta", result.stderr)
    assert "  generation     cache miss" in result.stdout
    again = run_lowbit("quickstart", "--model", str(tiny_llama), "--out", str(tmp_path / "s"), *args)
    assert again.returncode == 0, again.stderr
    assert "calibration: 2 self-generated rows x 32 tokens from the cache (" in again.stderr
    assert "  generation     cache hit" in again.stdout
