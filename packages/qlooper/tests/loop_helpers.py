"""Shared checks for the end-to-end loop tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from qformats.layouts.registry import LayoutMeta, get_layout
from qlooper import QuantizationRun
from toy_models import DENSE, ToyDecoder, toy_calibration

QUANTIZED_PER_LAYER = 7


def assert_packed_roundtrip(run: QuantizationRun, model: torch.nn.Module) -> None:
    """Every packed module unpacks to its logical weight, and the model holds the dequantized weight."""
    layout = get_layout(run.format)
    modules = dict(model.named_modules())
    for name, done in run.modules.items():
        w = done.weight
        meta = LayoutMeta(w.bits, w.group_size, w.in_features, w.out_features, w.sym)
        assert not layout.validate(done.tensors(), meta), name
        back = layout.unpack(done.tensors(), meta)
        assert np.array_equal(back.dequantize(), w.dequantize()), name
        dense = modules[name].weight.detach().float().numpy()
        assert np.allclose(dense, w.dequantize(), atol=1e-6), name


def output_error(model: torch.nn.Module) -> float:
    """Relative squared error of ``model``'s logits against the float toy model on calibration batches."""
    ref_model = ToyDecoder()
    cal = toy_calibration()
    num = den = 0.0
    with torch.no_grad():
        for b in cal.batches:
            ref = ref_model(b.input_ids, b.attention_mask)
            out = model(b.input_ids, b.attention_mask)
            num += float(((out - ref) ** 2).sum())
            den += float((ref**2).sum())
    return num / den


def assert_resumes_bit_identical(tmp_path: Path, method: str, run: QuantizationRun) -> None:
    """``resume_worker.py METHOD`` stopped at cursor 2 (SIGTERM) then resumed gives ``run``'s packed tensors."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = tmp_path / "out.npz"
    worker = Path(__file__).with_name("resume_worker.py")
    for fault, expected in (("sigterm@2", 3), ("none", 0)):
        args = [sys.executable, str(worker), method, str(tmp_path / "ckpt"), str(out), fault]
        proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)  # hang guard only
        assert proc.returncode == expected, proc.stderr[-3000:]
    assert json.loads(Path(f"{out}.json").read_text())["resumed_from"] == 2
    got = np.load(out)
    for name, done in run.modules.items():
        for key, value in done.tensors().items():
            assert np.array_equal(got[f"{name}/{key}"], value), f"{name}/{key}"


def expected_modules(layers: int = 4) -> int:
    return layers * QUANTIZED_PER_LAYER


__all__ = ["DENSE", "assert_packed_roundtrip", "assert_resumes_bit_identical", "expected_modules", "output_error"]
