"""QQQ: the reference's own pack writes the tensors, lowbit reads them, and both dequantize to the
identical float32 weight; lowbit's pack rewrites the reference's bytes exactly (golden digests included)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from peer_qqq import pack_with_reference, reference_dense, reference_qqq_inputs
from qformats.layouts.qqq import infer_meta, pack_qqq, unpack_qqq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/qformats/tests"))
from test_qqq_layout import GOLDEN, digest, formula_weight

SHAPES = [(128, 64, 128), (256, 128, 128), (512, 192, 128), (128, 64, -1), (256, 192, -1), (128, 128, 128)]


@pytest.mark.parametrize(("k", "n", "gs"), SHAPES)
def test_lowbit_reads_reference_pack_exactly(k: int, n: int, gs: int) -> None:
    weight, scales, s_extra = reference_qqq_inputs(k, n, gs, seed=k * 7 + n + gs)
    tensors = pack_with_reference(weight, scales, s_extra, gs)
    meta = infer_meta(tensors, group_size=gs)
    ours = unpack_qqq(tensors, meta)
    assert np.array_equal(ours.dequantize(), reference_dense(tensors, k, n, gs))
    again = pack_qqq(ours)
    for name, value in tensors.items():
        assert again[name].dtype == value.dtype and again[name].shape == value.shape, name
        assert np.array_equal(again[name].view(np.uint8), value.view(np.uint8)), name


@pytest.mark.parametrize(("k", "n", "gs"), list(GOLDEN))
def test_golden_digests_come_from_the_reference(k: int, n: int, gs: int) -> None:
    import torch

    w = formula_weight(k, n, gs)
    channel = torch.from_numpy(w.s_channel)
    if w.s_group is None:
        scales, s_extra = (channel * 16)[:, None], None
    else:
        scales, s_extra = torch.from_numpy(w.s_group.astype(np.float32)).T * channel[:, None], channel
    tensors = pack_with_reference(torch.from_numpy(w.dequantize()), scales, s_extra, gs)
    assert digest(tensors) == GOLDEN[(k, n, gs)]
    assert np.array_equal(reference_dense(tensors, k, n, gs), w.dequantize())
