"""EXL3 quantization: the stored symbols reload to the returned weight bit for bit, error falls with bits
and beats RTN and the trellis without feedback, determinism, and refused input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qalgos.errors import NumericalError, ShapeError, SpecError
from qalgos.exl3 import EXL3Result, quantize_exl3
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec
from qformats.layouts.exl3 import pack_exl3, unpack_exl3

OUT, IN = 128, 256


def weighted_error(q: torch.Tensor, w: torch.Tensor, h: torch.Tensor) -> float:
    d = q.double() - w.double()
    return float(torch.einsum("oi,ij,oj->", d, h.double(), d))


@pytest.fixture(scope="module")
def problem() -> tuple[torch.Tensor, torch.Tensor]:
    """A Gaussian weight ``[128, 256]`` and a random SPD Hessian ``2/N X^T X`` of correlated inputs."""
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(OUT, IN, generator=gen)
    mix = torch.randn(IN, IN, generator=gen) / IN**0.5
    x = torch.randn(4 * IN, IN, generator=gen) @ mix + 0.1 * torch.randn(4 * IN, IN, generator=gen)
    return w, 2 * x.T @ x / x.shape[0]


@pytest.fixture(scope="module")
def results(problem: tuple[torch.Tensor, torch.Tensor]) -> dict[str, EXL3Result]:
    w, h = problem
    found = {f"ldlq{b}": quantize_exl3(w, h, b) for b in (2, 3, 4)}
    found["plain4"] = quantize_exl3(w, h, 4, feedback=False)
    return found


def test_reload_is_bit_identical(results: dict[str, EXL3Result]) -> None:
    for res in results.values():
        tensors = pack_exl3(res.weight)
        assert tensors["trellis"].shape == (IN // 16, OUT // 16, 16 * res.weight.bits)
        assert tensors["suh"].dtype == np.float16 and tensors["svh"].dtype == np.float16
        reloaded = unpack_exl3(tensors, IN, OUT)
        assert np.array_equal(reloaded.symbols, res.weight.symbols)
        dense = reloaded.dequantize()
        assert dense.dtype == np.float32 and dense.shape == (OUT, IN)
        assert np.array_equal(dense, res.dequantized.numpy())
        assert float(np.abs(tensors["svh"]).min()) == float(np.abs(tensors["svh"]).max()) == res.scale


def test_error_falls_with_bits_and_beats_rtn_and_plain_trellis(
    problem: tuple[torch.Tensor, torch.Tensor], results: dict[str, EXL3Result]
) -> None:
    w, h = problem
    losses = {k: weighted_error(r.dequantized, w, h) for k, r in results.items()}
    for k, r in results.items():
        assert r.loss == pytest.approx(losses[k], rel=1e-9)
    assert losses["ldlq2"] > losses["ldlq3"] > losses["ldlq4"]
    rtn4 = weighted_error(quantize_rtn(w, QuantSpec(bits=4, group_size=128)).dequantized, w, h)
    assert losses["ldlq4"] < rtn4
    assert losses["ldlq4"] < losses["plain4"]
    # the plain trellis is a good quantizer of the rotated weight on its own: relative MSE near the 4-bit trellis's
    rel = float((results["plain4"].dequantized.double() - w.double()).square().sum() / w.double().square().sum())
    assert rel < 0.01


def test_without_hessian_is_the_plain_trellis(problem: tuple[torch.Tensor, torch.Tensor]) -> None:
    """No Hessian codes exactly what ``feedback=False`` codes (the Hessian only moves later targets), and
    its loss is the plain squared error."""
    w, h = problem
    small, h_small = w[:, :128].contiguous(), h[:128, :128].contiguous()
    a = quantize_exl3(small, None, 2, seed=3)
    b = quantize_exl3(small, h_small, 2, seed=3, feedback=False)
    assert np.array_equal(a.weight.symbols, b.weight.symbols)
    assert a.loss == pytest.approx(float((a.dequantized.double() - small.double()).square().sum()), rel=1e-9)
    assert b.loss == pytest.approx(weighted_error(b.dequantized, small, h_small), rel=1e-9)


def test_same_seed_same_bytes(problem: tuple[torch.Tensor, torch.Tensor]) -> None:
    w, h = problem
    w, h = w[:, :128].contiguous(), h[:128, :128].contiguous()
    first = pack_exl3(quantize_exl3(w, h, 2, codebook="mcg", seed=7).weight)
    second = pack_exl3(quantize_exl3(w, h, 2, codebook="mcg", seed=7).weight)
    assert sorted(first) == ["mcg", "suh", "svh", "trellis"]
    for key in first:
        assert first[key].tobytes() == second[key].tobytes()
    other = pack_exl3(quantize_exl3(w, h, 2, codebook="mcg", seed=8).weight)
    assert other["suh"].tobytes() != first["suh"].tobytes()


def test_bad_input_names_the_field() -> None:
    good = torch.randn(128, 128)
    with pytest.raises(ShapeError, match="weight"):
        quantize_exl3(torch.randn(128, 96), None, 4)
    with pytest.raises(ShapeError, match="weight"):
        quantize_exl3(torch.randn(192, 128), None, 4)
    bad = good.clone()
    bad[3, 5] = float("nan")
    with pytest.raises(ShapeError, match="weight"):
        quantize_exl3(bad, None, 4)
    for bits in (0, 9, True, 2.5):
        with pytest.raises(SpecError, match="bits"):
            quantize_exl3(good, None, bits)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="codebook"):
        quantize_exl3(good, None, 4, codebook="e8p")
    with pytest.raises(ShapeError, match="hessian"):
        quantize_exl3(good, torch.eye(64), 4)
    with pytest.raises(ShapeError, match="hessian"):
        quantize_exl3(good, torch.full((128, 128), float("inf")), 4)
    with pytest.raises(SpecError, match="damp"):
        quantize_exl3(good, torch.eye(128), 4, damp=-1.0)
    with pytest.raises(NumericalError, match="weight"):
        quantize_exl3(good * 1e6, None, 4)
    with pytest.raises(SpecError, match="window"):
        quantize_exl3(good, torch.eye(128), 4, window=0)
