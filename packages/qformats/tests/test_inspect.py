"""inspect(): the summary, the zero-convention verdict, violations, and the ``python -m`` command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from checkpoint_fixtures import AWQ_CONFIG, GPTQ_CONFIG, build
from qformats.inspect import inspect, main


def test_summary_of_an_awq_checkpoint(tmp_path: Path) -> None:
    build(tmp_path / "ck", max_shard_size=3000)
    s = inspect(tmp_path / "ck")
    assert (s.method, s.format, s.layout, s.bits, s.group_size, s.sym) == ("awq", "gemm", "gemm", 4, 32, False)
    assert s.zero_convention["convention"] == "v2" and "AWQ-005" in str(s.zero_convention["evidence"])
    assert len(s.modules) == 3 and s.dense_tensors == 4 and len(s.files) > 2
    m = s.modules[0]
    assert (m.in_features, m.out_features, m.layout) == (128, 64, "gemm")
    assert m.tensors["qweight"] == [[128, 8], "int32"]
    assert m.tensors["scales"] == [[4, 64], "float16"]
    assert s.violation_count == 0 and s.total_size > 0


def test_gptq_label_that_lies_is_reported(tmp_path: Path) -> None:
    build(tmp_path / "ck", layout="gptq_v2", sym=True)  # true zeros on disk ...
    qc = tmp_path / "ck" / "quantize_config.json"
    qc.write_text(json.dumps(GPTQ_CONFIG))  # ... labelled v1 ("gptq")
    s = inspect(tmp_path / "ck")
    assert s.zero_convention["convention"] == "v2" and s.zero_convention["confidence"] == "certain"
    assert s.zero_convention["label_disagrees"] is True


def test_violations_are_listed_per_module(tmp_path: Path) -> None:
    build(tmp_path / "ck")
    (tmp_path / "ck" / "quantize_config.json").write_text(json.dumps(dict(AWQ_CONFIG, group_size=64)))
    s = inspect(tmp_path / "ck")
    assert s.violation_count == 6
    assert any("AWQ-GEMM-SHAPE-SCALES" in v for v in s.modules[0].violations)


def test_main_prints_text_and_json_and_sets_the_exit_status(tmp_path: Path, capsys) -> None:
    build(tmp_path / "ck")
    assert main([str(tmp_path / "ck")]) == 0
    text = capsys.readouterr().out
    assert "layout gemm" in text and "model.layers.0.mlp.up_proj" in text
    assert main([str(tmp_path / "ck"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["bits"] == 4 and data["violation_count"] == 0 and len(data["modules"]) == 3
    assert main([str(tmp_path / "missing")]) == 2
    assert "no such checkpoint" in capsys.readouterr().err


def test_python_dash_m_entry_point(tmp_path: Path) -> None:
    build(tmp_path / "ck", layers=1)
    out = subprocess.run(
        [sys.executable, "-m", "qformats.inspect", str(tmp_path / "ck"), "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,  # hang guard
    )
    assert json.loads(out.stdout)["layout"] == "gemm"
