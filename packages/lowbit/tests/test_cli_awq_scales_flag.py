"""``lowbit quantize --awq-scales`` -> lowbit's ``awq_scales`` (GPTQ on AWQ-scaled weights): the setting, the
combinations it refuses, and a run that writes a GPTQ checkpoint recording the recipe under ``meta``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_lowbit
from lowbit.cli.parser import build_parser
from lowbit.cli.quantize_flags import quant_config
from lowbit.errors import UsageError
from qhf.config_view import awq_scales, checkpoint_method
from qhf.quant_config import QuantConfigError, read_quantize_config


def _config(*flags: str) -> dict[str, object]:
    return quant_config(build_parser().parse_args(["quantize", "model", "--out", "out", *flags]))


def test_flag_becomes_the_setting() -> None:
    assert _config("--awq-scales")["awq_scales"] is True
    assert awq_scales(read_quantize_config(_config("--awq-scales", "--desc-act", "--mse", "2")))
    assert "awq_scales" not in _config()
    awq_layout = read_quantize_config(_config("--awq-scales", "--asym", "--group-size", "64", "--format", "gemm"))
    assert awq_scales(awq_layout) and checkpoint_method(awq_layout) == "awq" and not awq_layout.sym
    with pytest.raises(QuantConfigError, match="use format 'gemm'"):
        read_quantize_config(_config("--awq-scales", "--asym"))


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (("--method", "awq", "--awq-scales"), "--awq-scales: a GPTQ variant of its own; not with --method awq"),
        (("--awq-scales", "--gptaq"), "not with --method gptq --gptaq"),
        (("--awq-scales", "--foem", "--eora-rank", "4"), "not with --method gptq --foem --eora-rank"),
        (("--method", "fp8", "--awq-scales"), "--awq-scales not used by a weight-only method"),
    ],
)
def test_bad_combinations_are_refused(flags: tuple[str, ...], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        _config(*flags)


def test_compute_dtype_is_refused_before_reading_the_model(tmp_path: Path) -> None:
    source = tmp_path / "not-a-model"
    source.mkdir()
    flags = ("--awq-scales", "--compute-dtype", "bfloat16")
    ran = run_lowbit("quantize", str(source), "--out", str(tmp_path / "q"), *flags)
    assert ran.returncode == 2 and "found --method gptq --awq-scales" in ran.stderr, ran.stderr


def test_run_writes_a_gptq_checkpoint_with_the_recipe(tiny_llama: Path, calibration_text: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    ran = run_lowbit("quantize", str(tiny_llama), "--out", str(out), "--calibration", str(calibration_text),
                     "--group-size", "32", "--samples", "8", "--length", "64", "--quiet", "--awq-scales")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert "quantize     gptq on AWQ-scaled weights 4-bit group 32 sym -> format gptq" in ran.stdout
    config = json.loads((out / "quantize_config.json").read_text())
    assert config["quant_method"] == "gptq" and config["meta"]["awq_scales"] is True
    assert json.loads((out / "quant_report.json").read_text())["summary"]["algorithm"] == {"name": "awq_gptq"}
