"""ParoQuant: the rotation is the identity at theta 0 and equals qformats' stored-layout arithmetic; the pair
schedule is a matching per group and round, fixed by its seed; the learned transform lowers a toy layer's output
error (outlier input channels) below plain AWQ at the same bits and group; the result is its stored layer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qalgos.awq import quantize_awq, search_clip
from qalgos.errors import ShapeError, SpecError
from qalgos.paroquant import ParoSpec, optimize_paroquant
from qalgos.paroquant_rotation import (
    RoundIndex,
    apply_blocks,
    module_seed,
    pair_schedule,
    rotate,
    rotation_blocks,
)
from qalgos.spec import QuantSpec
from qformats.layouts.paroquant import infer_meta, pack_paroquant, rotate_inputs, unpack_paroquant
from qformats.layouts.paroquant.logical import pairs_reason


def _toy(out: int = 48, k: int = 64, rows: int = 384) -> tuple[torch.Tensor, torch.Tensor]:
    """A weight ``[out, k]`` and inputs ``[rows, k]`` whose channels 3, 17, 40 carry 25x outliers."""
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(out, k, generator=gen) * 0.05
    x = torch.randn(rows, k, generator=gen)
    x[:, [c for c in (3, 17, 40) if c < k]] *= 25.0
    return weight, x


def test_rotation_is_identity_at_theta_zero() -> None:
    pairs = pair_schedule(64, 16, 5, seed=3)
    index = RoundIndex.from_pairs(pairs, 16)
    x = torch.randn(7, 64)
    theta = torch.zeros(5, 32)
    assert torch.equal(rotate(x, index, theta), x)
    assert torch.equal(rotation_blocks(index, theta, 16), torch.eye(16).expand(4, 16, 16))


def test_rotation_matches_the_stored_layout_arithmetic() -> None:
    pairs = pair_schedule(64, 16, 4, seed=5)
    index = RoundIndex.from_pairs(pairs, 16)
    theta = torch.randn(4, 32, dtype=torch.float64)
    x = torch.randn(5, 64, dtype=torch.float64)
    ours = rotate(x, index, theta)
    stored = rotate_inputs(x.numpy(), pairs.numpy(), theta.numpy(), np.ones((1, 64)), 16)
    assert np.allclose(ours.numpy(), stored, atol=1e-6)  # the layout takes cos/sin in float32
    assert torch.allclose(apply_blocks(x, rotation_blocks(index, theta, 16)), ours, atol=1e-12)
    assert torch.allclose(rotate(ours, index, theta, inverse=True), x, atol=1e-12)


def test_pair_schedule_is_a_seeded_matching() -> None:
    pairs = pair_schedule(128, 32, 8, seed=11)
    assert pairs.dtype == torch.int16 and pairs.shape == (8, 128)
    assert pairs_reason(pairs.numpy(), 32) is None
    assert torch.equal(pairs, pair_schedule(128, 32, 8, seed=11))
    assert not torch.equal(pairs, pair_schedule(128, 32, 8, seed=12))
    assert module_seed(0, 1, "a.q_proj") != module_seed(0, 2, "a.q_proj")
    with pytest.raises(SpecError, match="krot"):
        pair_schedule(64, 8, 8, seed=0)  # a group of 8 has 7 distinct matchings


def test_learned_transform_beats_plain_awq_on_outliers() -> None:
    weight, x = _toy()
    spec = ParoSpec(group_size=32, krot=4, rotation_epochs=10, finetune_epochs=1, train_samples=320)
    result = optimize_paroquant(weight, x, spec, seed=1)
    probe = x[-spec.validation_samples :]

    def output_error(dense: torch.Tensor) -> float:
        return float(((probe @ dense.T - probe @ weight.T) ** 2).mean())

    awq_spec = QuantSpec(bits=4, group_size=32, sym=False)
    awq = quantize_awq(weight, awq_spec, clip=search_clip(weight, x, awq_spec))
    assert result.fallback is None and not result.weight.is_identity()
    assert output_error(result.dequantized) < 0.75 * output_error(awq.dequantized)
    assert result.loss < 0.5 * result.notes["identity_loss"]


def test_result_is_the_stored_layer_and_runs_are_deterministic() -> None:
    weight, x = _toy(out=16, k=32, rows=96)
    spec = ParoSpec(group_size=16, krot=3, rotation_epochs=1, finetune_epochs=1, train_samples=64, batch_size=32)
    first = optimize_paroquant(weight, x, spec, seed=4)
    again = optimize_paroquant(weight, x, spec, seed=4)
    assert torch.equal(first.dequantized, again.dequantized)
    assert torch.equal(first.dequantized, torch.from_numpy(first.weight.dequantize()))
    tensors = pack_paroquant(first.weight)
    assert tensors["pairs"].dtype == np.int16 and tensors["theta"].dtype == np.float16
    back = unpack_paroquant(tensors, infer_meta(tensors, group_size=16))
    assert np.array_equal(back.dequantize(), first.weight.dequantize())


def test_no_rows_falls_back_to_the_identity_transform() -> None:
    weight, _ = _toy(out=8, k=32)
    result = optimize_paroquant(weight, torch.empty(0, 32), ParoSpec(group_size=16, krot=2), seed=0)
    assert result.fallback is not None and result.weight.is_identity()


def test_bad_input_is_named() -> None:
    with pytest.raises(SpecError, match="bits"):
        ParoSpec(bits=3)
    with pytest.raises(SpecError, match="rotation_lr"):
        ParoSpec(rotation_lr=0.0)
    with pytest.raises(SpecError, match="group_size"):
        optimize_paroquant(torch.randn(4, 48), torch.randn(8, 48), ParoSpec(group_size=32))
    with pytest.raises(ShapeError, match="x"):
        optimize_paroquant(torch.randn(4, 32), torch.randn(8, 16), ParoSpec(group_size=32))
