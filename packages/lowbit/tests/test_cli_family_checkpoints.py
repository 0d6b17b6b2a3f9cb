"""``lowbit inspect`` / ``lowbit convert`` on QQQ and EXL3 checkpoint directories (written with qformats' packers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from conftest import run_lowbit
from qformats.checkpoint import open_checkpoint, write_checkpoint
from qformats.layouts.exl3 import EXL3Weight, pack_exl3
from qformats.layouts.qqq import QQQWeight, pack_qqq

MODULE = "model.layers.0.mlp.up_proj"


def _write(path: Path, family: str) -> np.ndarray:
    """A one-module ``family`` checkpoint; returns its dense float32 weight."""
    rng = np.random.default_rng(3)
    if family == "qqq":
        weight = QQQWeight(rng.integers(1, 16, (128, 128)).astype(np.uint8), None, np.full(128, 0.01, np.float32))
        tensors, config = pack_qqq(weight), {"bits": 4, "group_size": -1, "sym": True, "wbits": 4}
    else:
        symbols = rng.integers(0, 4, (8, 8, 256)).astype(np.uint8)
        weight = EXL3Weight(symbols, 2, "mcg", np.ones(128, np.float16), np.ones(128, np.float16))
        tensors, config = pack_exl3(weight), {"bits": 2.0, "group_size": -1, "codebook": "mcg"}
    config.update(method=family, quant_method=family, format=family, checkpoint_format=family)
    write_checkpoint(path, {f"{MODULE}.{k}": v for k, v in tensors.items()}, quantize_config=config, model_config=None)
    return np.asarray(weight.dequantize(), np.float32)


def test_inspect_reports_family_modules_and_convert_transcodes_qqq_exactly(tmp_path: Path) -> None:
    dense = _write(tmp_path / "qqq", "qqq")
    shown = run_lowbit("inspect", str(tmp_path / "qqq"), "--json")
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    assert summary["layout"] == "qqq" and summary["violation_count"] == 0
    assert [(m["name"], m["layout"], m["in_features"]) for m in summary["modules"]] == [(MODULE, "qqq", 128)]
    result = run_lowbit("convert", str(tmp_path / "qqq"), "--to", "gptq", "--out", str(tmp_path / "gptq"))
    assert result.returncode == 0, result.stderr
    assert "1 transcoded bit exactly, 0 requantized" in result.stdout
    out = open_checkpoint(tmp_path / "gptq")
    assert np.array_equal(out.dense(out.modules()[0]), dense)
    back = run_lowbit("convert", str(tmp_path / "gptq"), "--to", "qqq", "--out", str(tmp_path / "back"))
    assert back.returncode == 0, back.stderr
    assert json.loads((tmp_path / "back" / "quantize_config.json").read_text())["format"] == "qqq"


def test_convert_of_exl3_is_refused_by_name_even_when_lossy_is_allowed(tmp_path: Path) -> None:
    _write(tmp_path / "exl3", "exl3")
    shown = run_lowbit("inspect", str(tmp_path / "exl3"))
    assert shown.returncode == 0 and "exl3 2-bit" in shown.stdout, shown.stderr
    for extra in ((), ("--allow-lossy",)):
        result = run_lowbit("convert", str(tmp_path / "exl3"), "--to", "gptq", "--out", str(tmp_path / "o"), *extra)
        assert result.returncode != 0 and MODULE in result.stderr and "exl3" in result.stderr, result.stderr
        assert not any((tmp_path / "o").glob("*.safetensors"))
