"""The typed run summary: fields, the quant_report.json form (keys, order, optional keys), the deprecated
``summary["key"]`` access, and the quant_log rows built from qlooper's report rows."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import qhf
from qhf.save.quant_log import REPORT_COLUMNS, log_rows
from qhf.summary import CalibrationStats, QuantizeSummary, SavedCheckpoint
from qlooper.report import ModuleReport

BASE = {
    "source": "/src",
    "model_type": "llama",
    "method": "gptq",
    "format": "gptq",
    "bits": 4,
    "group_size": 32,
    "sym": True,
    "modules": 14,
    "fallbacks": ("model.layers.0.mlp.up_proj",),
    "resumed_from": 0,
    "quantize_seconds": 1.5,
    "largest_layer_bytes": 1024,
}


def test_report_dict_keeps_the_files_key_order_and_leaves_unset_optional_keys_out() -> None:
    bare = QuantizeSummary(**BASE)  # type: ignore[arg-type]
    assert list(bare.report_dict()) == [
        "source", "model_type", "method", "format", "bits", "group_size", "sym", "modules", "fallbacks",
        "resumed_from", "quantize_seconds", "largest_layer_bytes", "lockstep_skipped",
    ]  # fmt: skip
    full = dataclasses.replace(
        bare,
        calibration_source="user",
        tokenizer_note="pad = eos_token",
        calibration=CalibrationStats(rows=4, tokens=128, dropped=1),
        calibration_seconds=0.25,
        adapter={"name": "lora", "rank": 8, "modules": 14},
        algorithm={"name": "gptaq", "alpha": 0.25},
        executor={"executor": "local-shards"},
        dense_dtype="float16",
        saved=SavedCheckpoint(path="/out", shards=1, bytes=2048, seconds=0.5),
        verification={"passed": True},
    )
    report = full.report_dict()
    assert list(report) == [
        "source", "model_type", "calibration_source", "tokenizer_note", "calibration", "calibration_seconds",
        "method", "format", "bits", "group_size", "sym", "modules", "fallbacks", "resumed_from", "quantize_seconds",
        "largest_layer_bytes", "lockstep_skipped", "adapter", "algorithm", "executor", "dense_dtype", "saved",
        "verification",
    ]  # fmt: skip
    assert report["calibration"] == {"rows": 4, "tokens": 128, "dropped": 1}
    assert report["saved"] == {"path": "/out", "shards": 1, "bytes": 2048, "seconds": 0.5}
    assert report["fallbacks"] == ["model.layers.0.mlp.up_proj"] and json.loads(json.dumps(report)) == report
    assert full.verified and not bare.verified
    assert not dataclasses.replace(full, verification="skipped (verify=False)").verified


def test_summary_is_frozen_and_item_access_is_deprecated() -> None:
    summary = QuantizeSummary(**BASE, calibration=CalibrationStats(2, 64, 0))  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        summary.modules = 3  # type: ignore[misc]
    with pytest.warns(DeprecationWarning, match=r"summary\.calibration"):
        assert summary["calibration"]["tokens"] == 64  # the report form, as the dict was
    with pytest.warns(DeprecationWarning), pytest.raises(KeyError):
        summary["saved"]  # not set before save, as the dict had no key
    with pytest.warns(DeprecationWarning):
        assert "calibration" in summary and "saved" not in summary


def _row(module: str, tokens: int, fallback: str | None = None, reason: str | None = None) -> ModuleReport:
    return ModuleReport(0, module, "gptq", "gptq", 4, 32, 0.5, tokens, 0.01, None, fallback, reason, 1.25)


def test_log_rows_name_the_file_columns_in_module_order() -> None:
    report = [_row("b", 7, "rtn", "no tokens"), _row("a", 9), _row("c", 0, "rtn")]
    rows = log_rows(["a", "b", "c", "d"], report)
    assert [list(row) for row in rows] == [list(REPORT_COLUMNS)] * 4
    assert [(r["module"], r["samples"], r["fallback"]) for r in rows] == [
        ("a", 9, None),
        ("b", 7, "no tokens"),
        ("c", 0, "rtn"),
        ("d", None, None),
    ]


def test_quantize_and_save_return_the_typed_summary_and_write_its_report_form(tiny_dirs, tmp_path: Path) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "rtn", "bits": 4, "group_size": 32})
    summary = qm.quantize()
    assert isinstance(summary, QuantizeSummary) and qm.summary is summary and qm.run is not None
    assert (summary.method, summary.format, summary.bits, summary.group_size, summary.sym) == (
        "rtn",
        "gptq",
        4,
        32,
        True,
    )
    assert summary.modules == len(qm.results or {}) == len(qm.run.report) == 14
    assert summary.calibration is None and summary.calibration_source is None and summary.saved is None
    saved = qm.save(tmp_path / "q")
    assert saved.saved is not None and saved.saved.shards == 1 and saved.saved.bytes > 0 and saved.verified
    assert saved.dense_dtype == "float32" and qm.summary is saved and dataclasses.replace(saved, saved=None,
        verification=None, dense_dtype=None) == summary  # fmt: skip
    written = json.loads((tmp_path / "q" / "quant_report.json").read_text())
    assert written["summary"] == json.loads(json.dumps(saved.report_dict()))
    assert [row["module"] for row in written["modules"]] == list(qm.results or {})
    assert all(row["samples"] == 0 for row in written["modules"])
