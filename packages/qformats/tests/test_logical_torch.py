"""The optional torch adapter: zero-copy where possible, bfloat16 handled, weights converted."""

from __future__ import annotations

import numpy as np
import torch  # the qformats test extra installs torch
from qformats.logical import default_g_idx
from qformats.torch_adapter import to_numpy, to_torch, weight_from_torch, weight_to_torch


def test_cpu_conversions_share_memory() -> None:
    t = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    a = to_numpy(t)
    a[0, 0] = 99
    assert int(t[0, 0]) == 99
    back = to_torch(a)
    back[0, 1] = -5
    assert int(a[0, 1]) == -5


def test_read_only_and_bfloat16_are_copied_exactly() -> None:
    a = np.arange(4, dtype=np.int32)
    a.flags.writeable = False
    assert to_torch(a).tolist() == [0, 1, 2, 3]
    b = torch.tensor([1.5, -2.25, 3.0e-3], dtype=torch.bfloat16)
    arr = to_numpy(b)
    assert arr.dtype == np.float32
    assert torch.equal(to_torch(arr, dtype="bfloat16"), b)


def test_weight_round_trip() -> None:
    codes = torch.randint(0, 16, (8, 64), dtype=torch.int64)
    scales = torch.rand(2, 8, dtype=torch.float16)
    zeros = torch.full((2, 8), 8, dtype=torch.int64)
    g_idx = torch.from_numpy(default_g_idx(64, 32))
    w = weight_from_torch(codes, scales, zeros, g_idx, bits=4, group_size=32, sym=True)
    assert w.codes.dtype == np.uint8 and w.scales.dtype == np.float16 and w.zeros.dtype == np.int32
    out = weight_to_torch(w)
    assert torch.equal(out["codes"].to(torch.int64), codes) and torch.equal(out["scales"], scales)
