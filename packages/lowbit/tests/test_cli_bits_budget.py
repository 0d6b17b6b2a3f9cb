"""``lowbit quantize --bits-budget / --bits-candidates`` -> lowbit's ``bits_budget`` / ``bits_candidates`` settings,
and the summary line of a mixed-precision run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_lowbit
from lowbit.cli.parser import build_parser
from lowbit.cli.quantize_cmd import mixed_precision_text
from lowbit.cli.quantize_flags import quant_config
from lowbit.errors import UsageError
from qhf.quant_config import QuantConfigError, read_quantize_config


def _config(*flags: str) -> dict[str, object]:
    return quant_config(build_parser().parse_args(["quantize", "model", "--out", "out", *flags]))


def test_flags_become_settings() -> None:
    cfg = read_quantize_config(_config("--bits-budget", "4.25"))
    assert cfg.settings["bits_budget"] == 4.25 and cfg.settings["bits_candidates"] == [4, 8]
    cfg = read_quantize_config(_config("--bits-budget", "3.5", "--bits-candidates", "3,4", "--bits", "3"))
    assert (cfg.width, cfg.settings["bits_candidates"]) == (3, [3, 4])
    assert "bits_budget" not in _config() and "bits_candidates" not in _config()


@pytest.mark.parametrize(
    ("flags", "error", "match"),
    [
        (("--bits-candidates", "3,4"), UsageError, "only together with --bits-budget"),
        (("--method", "fp8", "--bits-budget", "4.25"), UsageError, "--bits-budget not used by a weight-only method"),
        (("--method", "awq", "--bits-budget", "4.25"), QuantConfigError, "method 'awq' cannot take a budget"),
    ],
)
def test_bad_combinations_are_refused(flags: tuple[str, ...], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        read_quantize_config(_config(*flags))


def test_summary_line() -> None:
    record = {
        "bits_budget": 4.25,
        "bits_per_weight": 4.24871,
        "modules_by_bits": {"3": 12, "4": 180, "8": 18},
        "rules": 9,
    }
    assert mixed_precision_text(record) == (
        "4.2487 stored bits/weight (budget 4.25): 12 at 3-bit, 180 at 4-bit, 18 at 8-bit; 9 dynamic rules "
        "(per module: quant_report.json)"
    )


def test_quantize_with_a_budget_and_inspect_the_widths(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    result = run_lowbit(
        "quantize", str(tiny_llama), "--bits-budget", "5.5", "--group-size", "32", "--samples", "4", "--length", "48",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "widths [4, 8] within 5.5 bits/weight" in result.stdout
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("widths "))
    achieved = float(line.split()[1])
    assert achieved <= 5.5 and "verified     passed" in result.stdout
    widths = json.loads((out / "quant_report.json").read_text())["summary"]["mixed_precision"]["bits"]
    shown = run_lowbit("inspect", str(out))
    assert shown.returncode == 0, shown.stderr
    for name, bits in widths.items():
        assert f"  {name}  " in shown.stdout and f"gptq {bits}-bit g32" in shown.stdout.split(f"  {name}  ", 1)[1]
    engines = shown.stdout.split("engines      ", 1)[1].splitlines()
    exllama = next(ln for ln in engines if ln.strip().startswith("vllm:exllama "))
    assert exllama.split()[1] == "loads"  # 4 and 8 bits
    four_only = next(ln for ln in engines if ln.strip().startswith("transformers+gptqmodel:exllamav2 "))
    assert four_only.split()[1] == "no" and "8-bit (a dynamic rule) not in {4}" in four_only


def test_a_target_must_read_every_candidate_width(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    result = run_lowbit(
        "quantize", str(tiny_llama), "--bits-budget", "4.25", "--bits-candidates", "3,4,8", "--group-size", "32",
        "--target", "vllm:exllama", "--out", str(out),
    )  # fmt: skip
    assert result.returncode == 2 and not out.exists()
    assert "--target vllm:exllama: with --bits-budget any module may get any candidate width" in result.stderr
    assert "3-bit" in result.stderr and "8-bit" not in result.stderr and "4-bit" not in result.stderr
