"""Shared checks for the end-to-end loop tests."""

from __future__ import annotations

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


def expected_modules(layers: int = 4) -> int:
    return layers * QUANTIZED_PER_LAYER


__all__ = ["DENSE", "assert_packed_roundtrip", "expected_modules", "output_error"]
