"""EXL3: module tensors decoded by GPT-QModel 7.7.0's torch EXL3 path (``ExllamaV3TorchLinear``, CPU) and
by lowbit: the decoded trellis is identical, the dense weight agrees to float32 rounding (the Hadamard
products sum in another order), and lowbit rewrites the trellis words exactly. The reference's EXL3
quantizer is not run (its pipeline targets a GPU); the tensors are random trellis words, which the
format allows (every word pattern decodes)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from qformats.layouts.exl3 import pack_exl3, unpack_exl3, validate_exl3

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/qformats/tests"))
from test_exl3_layout import GOLDEN_INNER_ROW0, GOLDEN_INNER_SHA256, golden_tensors


def reference_module(tensors: dict[str, np.ndarray], k: int, n: int) -> torch.nn.Module:
    from gptqmodel.nn_modules.exllamav3_torch import ExllamaV3TorchLinear

    return ExllamaV3TorchLinear.from_tensors(
        in_features=k, out_features=n, name="probe", tensors={a: torch.from_numpy(b) for a, b in tensors.items()}
    )


@pytest.mark.parametrize("codebook", ["mcg", "mul1", "3inst"])
@pytest.mark.parametrize("bits", [1, 2, 3, 4, 5, 8])
def test_lowbit_decodes_exl3_like_the_reference(bits: int, codebook: str) -> None:
    k, n = 256, 128
    rng = np.random.default_rng(bits * 10 + len(codebook))
    tensors = {
        "trellis": rng.integers(-32768, 32768, (k // 16, n // 16, 16 * bits)).astype(np.int16),
        "suh": (rng.random(k) + 0.5).astype(np.float16),
        "svh": (rng.random(n) + 0.5).astype(np.float16),
    }
    if codebook != "3inst":
        tensors[codebook] = np.zeros((1,), np.int32)
    module = reference_module(tensors, k, n)
    assert validate_exl3(tensors, k, n) == []
    ours = unpack_exl3(tensors, k, n)
    assert np.array_equal(ours.inner(), module._decode_inner_weight().numpy())
    theirs = module._materialize_weight_fp32().T.numpy()
    assert np.abs(ours.dequantize() - theirs).max() <= 1e-6 * np.abs(theirs).max()
    assert np.array_equal(pack_exl3(ours)["trellis"], tensors["trellis"])


def test_golden_inner_comes_from_the_reference() -> None:
    inner = reference_module(golden_tensors(), 128, 128)._decode_inner_weight().numpy()
    assert hashlib.sha256(inner.tobytes()).hexdigest() == GOLDEN_INNER_SHA256
    assert inner[0, :4].tolist() == GOLDEN_INNER_ROW0
