"""Bad arguments fail with status 2 and one message naming the flag, what was expected and what was found."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import run_lowbit


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["quantize", "m", "--out", "o", "--method", "int3"], "invalid choice: 'int3'"),
        (
            ["quantize", "m", "--out", "o", "--group-size", "0"],
            "expected -1 (per channel) or a positive integer, found 0",
        ),
        (["quantize", "m"], "the following arguments are required: --out"),
        (["quantize", "m", "--out", "o", "--samples", "many"], "expected a positive integer, found 'many'"),
        (["bench", "--tokens", "1,x"], "expected comma-separated positive integers, found '1,x'"),
        (["convert", "d", "--out", "o"], "the following arguments are required: --to"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
    ],
)
def test_parser_errors(args: list[str], message: str) -> None:
    result = run_lowbit(*args)
    assert result.returncode == 2
    assert message in result.stderr


def test_quantize_checks_paths_and_flags_before_loading(tiny_llama: Path, tmp_path: Path) -> None:
    missing = run_lowbit("quantize", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr and "nope" in missing.stderr
    resume = run_lowbit("quantize", str(tiny_llama), "--out", str(tmp_path / "o"), "--resume")
    assert resume.returncode == 2 and "--resume needs --checkpoint-dir" in resume.stderr
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("x")
    taken = run_lowbit("quantize", str(tiny_llama), "--out", str(busy))
    assert taken.returncode == 2 and "is not an empty directory" in taken.stderr
    assert (busy / "keep.txt").read_text() == "x"
    png = run_lowbit("quantize", str(tiny_llama), "--out", str(tmp_path / "o"), "--plot", str(tmp_path / "x.jpg"))
    assert png.returncode == 2 and "expected a .png file name" in png.stderr


def test_integer_quantizer_flags_with_a_weight_only_method_are_refused(tiny_llama: Path, tmp_path: Path) -> None:
    result = run_lowbit("quantize", str(tiny_llama), "--out", str(tmp_path / "o"), "--method", "nf4", "--asym")
    assert result.returncode == 2
    assert "--method nf4: --asym not used by a weight-only method" in result.stderr
    fp8 = run_lowbit("quantize", str(tiny_llama), "--out", str(tmp_path / "o"), "--method", "fp8", "--bits", "4")
    assert fp8.returncode == 2 and "bits: FP8 stores 8-bit weights, found 4" in fp8.stderr
    block = run_lowbit(
        "quantize", str(tiny_llama), "--out", str(tmp_path / "o"), "--method", "gguf", "--fp8-block", "32,32"
    )
    refused = "--fp8-block: an FP8 scale setting; not with --method gguf (taken by --method fp8)"
    assert block.returncode == 2 and refused in block.stderr
    assert not (tmp_path / "o").exists()


def test_bad_calibration_file_and_format_are_named(tiny_llama: Path, tmp_path: Path) -> None:
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"text": "fine"}\n{"prompt": 3}\n')
    result = run_lowbit("quantize", str(tiny_llama), "--out", str(tmp_path / "o"), "--calibration", str(bad))
    assert result.returncode == 2
    assert "line 2: expected a string, a list of token ids or an object with 'text' or 'input_ids'" in result.stderr
    fmt = run_lowbit("quantize", str(tiny_llama), "--out", str(tmp_path / "o2"), "--format", "marlin")
    assert fmt.returncode == 2 and "format" in fmt.stderr and "'marlin'" in fmt.stderr


def test_plot_without_matplotlib_says_how_to_install_it(
    quantized: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails as if not installed
    result = run_lowbit("inspect", str(quantized), "--plot", str(tmp_path / "c.png"))
    assert result.returncode == 2
    assert "--plot needs matplotlib" in result.stderr and "pip install 'lowbit[plot]'" in result.stderr
    assert not (tmp_path / "c.png").exists()
