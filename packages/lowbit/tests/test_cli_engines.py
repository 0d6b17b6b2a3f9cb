"""Engine readiness through the CLI: ``--target`` adjusts or refuses before any work, ``--dtype``, and the
engine report of ``inspect`` and of the end of ``quantize`` (tiny llama: hidden 64, intermediate 128)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import run_lowbit


def test_target_adjusts_the_group_size_and_dtype_and_says_so(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    result = run_lowbit(
        "quantize", str(tiny_llama), "--method", "rtn", "--group-size", "48", "--target", "vllm:gptq",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "target       vllm:gptq: adjusted for vllm:gptq: group_size 48 -> 64, dtype float32 -> float16" in (
        result.stdout
    )
    config = json.loads((out / "config.json").read_text())
    assert config["quantization_config"]["group_size"] == 64 and config["dtype"] == "float16"
    engines = result.stdout.split("engines      ", 1)[1].splitlines()
    line = next(ln for ln in engines if ln.strip().startswith("vllm:gptq "))
    assert line.split()[1] == "loads"


def test_target_no_setting_can_satisfy_is_refused_before_any_work(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    result = run_lowbit("quantize", str(tiny_llama), "--method", "rtn", "--target", "vllm:machete", "--out", str(out))
    assert result.returncode == 2
    assert "target 'vllm:machete': no setting change lets it load this model" in result.stderr
    assert "q_proj: N=64 not divisible by 128 (and 9 more of 14 modules)" in result.stderr
    assert not out.exists()


def test_unknown_target_is_a_usage_error(tiny_llama: Path, tmp_path: Path) -> None:
    result = run_lowbit("quantize", str(tiny_llama), "--target", "tgi", "--out", str(tmp_path / "q"))
    assert result.returncode == 2 and "--target: target 'tgi': unknown engine or kernel" in result.stderr


def test_dtype_flag_and_the_inspect_engine_report(tiny_llama: Path, tmp_path: Path) -> None:
    out = tmp_path / "q"
    result = run_lowbit(
        "quantize", str(tiny_llama), "--method", "rtn", "--group-size", "32", "--dtype", "bfloat16",
        "--out", str(out), "--quiet",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "dense dtype  bfloat16" in result.stdout
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    shown = run_lowbit("inspect", str(out))
    assert shown.returncode == 0, shown.stderr
    engines = shown.stdout.split("engines      ", 1)[1].splitlines()
    by_key = {ln.split()[0]: ln.split()[1] for ln in engines[1:]}
    assert by_key["vllm:gptq"] == "loads" and by_key["llama.cpp:gguf"] == "no"
    assert by_key["vllm:machete"] == "no"  # N=64 is not a multiple of its 128 tile
    as_json = json.loads(run_lowbit("inspect", str(out), "--json").stdout)
    gptq = next(e for e in as_json["engines"] if (e["engine"], e["kernel"]) == ("vllm", "gptq"))
    assert gptq["loads"] is True and gptq["failures"][0]["rule"] == "dtype in {float16}"
