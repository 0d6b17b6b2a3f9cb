"""QQQ: grouped solves are GPTQ's codes split into QQQ's two scale levels; the per-channel grid is the
signed ±7 one; group == in is stored per-channel; fallbacks stay on QQQ's grids; bad specs are named."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import correlated_activations, output_error
from qalgos.errors import SpecError
from qalgos.gptq import GPTQ
from qalgos.qqq import QQQ, qqq_spec, quantize_qqq_rtn
from qalgos.spec import QuantSpec
from qformats.layouts.qqq import QQQWeight, pack_qqq


@pytest.fixture
def weight() -> torch.Tensor:
    """``[64, 96]``: QQQ tiles need ``out % 64 == 0``."""
    return torch.randn(64, 96, generator=torch.Generator().manual_seed(7))


def _solve(spec: QuantSpec, weight: torch.Tensor, x: torch.Tensor) -> object:
    task = QQQ(weight.shape[1], spec)
    task.add_batch(x)
    return task.quantize(weight)


def test_grouped_is_gptq_codes_with_two_scale_levels(weight: torch.Tensor) -> None:
    x = correlated_activations(512, weight.shape[1])
    spec = qqq_spec(32)
    result = _solve(spec, weight, x)
    plain = GPTQ(weight.shape[1], spec)
    plain.add_batch(x)
    gptq = plain.quantize(weight)
    qqq = result.weight
    assert isinstance(qqq, QQQWeight) and qqq.group_size == 32
    assert np.array_equal(qqq.codes, gptq.weight.codes) and result.loss == gptq.loss
    s_channel = (weight.abs().amax(dim=1) / 127).numpy()
    assert np.array_equal(qqq.s_channel, s_channel.astype(np.float32))
    assert np.array_equal(qqq.s_group, (gptq.weight.scales / s_channel[None, :]).astype(np.float16))
    assert torch.equal(result.dequantized, torch.from_numpy(qqq.dequantize()))
    assert result.damp == pytest.approx(0.005)
    pack_qqq(qqq)  # the layout holds it


def _direct_per_channel(w: torch.Tensor, x: torch.Tensor) -> np.ndarray:
    """The per-channel QQQ recurrence as a plain float64 column loop: codes ``[out, in]`` in 1..15."""
    h = 2.0 / x.shape[0] * (x.double().T @ x.double())
    h += 0.005 * torch.diagonal(h).mean() * torch.eye(h.shape[0], dtype=torch.float64)
    upper = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    w = w.double().clone()
    scale = w.abs().amax(dim=1) / 7
    codes = torch.empty_like(w)
    for j in range(w.shape[1]):
        q = torch.clamp(torch.round(w[:, j] / scale), -7, 7)
        codes[:, j] = q + 8
        err = (w[:, j] - q * scale) / upper[j, j]
        w[:, j:] -= torch.outer(err, upper[j, j:])
    return codes.to(torch.uint8).numpy()


def test_per_channel_grid_is_signed_seven(weight: torch.Tensor) -> None:
    x = correlated_activations(512, weight.shape[1])
    result = _solve(qqq_spec(-1), weight, x)
    qqq = result.weight
    assert qqq.group_size == -1 and qqq.s_group is None
    assert int(qqq.codes.min()) >= 1 and int(qqq.codes.max()) <= 15
    assert np.array_equal(qqq.s_channel, (weight.abs().amax(dim=1) / 7 / 16).numpy())
    agree = float((qqq.codes == _direct_per_channel(weight, x)).mean())
    assert agree > 0.99, agree
    rtn = quantize_qqq_rtn(weight, qqq_spec(-1))
    assert output_error(x, weight, result.dequantized) < 0.8 * output_error(x, weight, rtn.dequantized)


def test_one_group_over_the_whole_input_is_stored_per_channel(weight: torch.Tensor) -> None:
    x = correlated_activations(256, weight.shape[1])
    result = _solve(qqq_spec(weight.shape[1]), weight, x)  # the grouped grid, stored as per-channel QQQ
    assert result.weight.group_size == -1 and result.weight.s_group is None
    plain = GPTQ(weight.shape[1], qqq_spec(weight.shape[1]))
    plain.add_batch(x)
    gptq = plain.quantize(weight)
    assert np.array_equal(result.weight.codes, gptq.weight.codes)
    assert np.allclose(result.dequantized.numpy(), gptq.weight.dequantize(), rtol=1e-6, atol=0)


def test_no_token_falls_back_to_rtn_on_qqq_grid(weight: torch.Tensor) -> None:
    result = QQQ(weight.shape[1], qqq_spec(-1)).quantize(weight)
    assert result.fallback and "no calibration token" in result.fallback
    assert isinstance(result.weight, QQQWeight) and int(result.weight.codes.min()) >= 1
    direct = torch.clamp(torch.round(weight / (weight.abs().amax(dim=1, keepdim=True) / 7)), -7, 7) + 8
    assert np.array_equal(result.weight.codes, direct.to(torch.uint8).numpy())


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"bits": 3}, "bits"),
        ({"sym": False}, "sym"),
        ({"desc_act": True}, "desc_act"),
        ({"scale_dtype": "float16"}, "scale_dtype"),
        ({"mse": 2.0}, "mse"),
    ],
)
def test_bad_specs_are_named(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError, match=field):
        qqq_spec(128, **kwargs)


def test_group_must_divide_in_features() -> None:
    with pytest.raises(SpecError, match="in=96, group=64"):
        QQQ(96, qqq_spec(64))
