"""The learned residual rotation: its rounding matches RTN, the optimized loss falls below the Hadamard start on a
model with an outlier channel, the matrix stays orthogonal, and the same seed gives the same bytes."""

from __future__ import annotations

import pytest
import torch
from qalgos.errors import ShapeError
from qalgos.group_params import gptq_params
from qalgos.learned_rotation import READER, WRITER, RotationTerm, fake_quant, gram_factor, learn_rotation
from qalgos.orthogonal import randomized_hadamard
from qalgos.rtn import quantize_groups
from qalgos.spec import QuantSpec

N = 64


@pytest.mark.parametrize("sym", [True, False])
@pytest.mark.parametrize("columns", [64, 80])  # 80: a partial last group of 16
def test_the_fake_quantizer_rounds_as_rtn_does(sym: bool, columns: int) -> None:
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(24, columns, generator=generator) * torch.linspace(0.1, 3.0, columns)
    weight[3] = 0.0  # an all-zero row takes the range [-1, 1]
    weight[5, :32] = weight[5, :32].abs()  # a group with no negative value
    spec = QuantSpec(bits=3, group_size=32, sym=sym)
    expected = quantize_groups(weight, spec, gptq_params)[3]
    got = fake_quant(weight, spec)
    assert torch.allclose(got, expected, rtol=0, atol=1e-6 * float(weight.abs().max()))


def _outlier_model(seed: int = 0) -> list[RotationTerm]:
    """Two readers and a writer of a 64-wide residual stream whose inputs have an outlier channel (channel 7 has
    30x the others' RMS), their weights a few large columns."""
    generator = torch.Generator().manual_seed(seed)
    scale = torch.ones(N)
    scale[7] = 30.0
    x = torch.randn(512, N, generator=generator, dtype=torch.float64) * scale.double()
    gram = x.T @ x / x.shape[0]
    terms = []
    for index in range(2):
        weight = torch.randn(48, N, generator=generator) * 0.1
        weight[:, 7] *= 0.05  # the outlier channel's small norm scale, folded in
        weight[:, 11 + index] *= 8.0
        factor, floor = gram_factor(gram, rank=8)
        terms.append(RotationTerm(f"reader{index}", READER, weight, factor, floor))
    inner = torch.randn(512, 96, generator=generator, dtype=torch.float64)
    factor, floor = gram_factor(inner.T @ inner / inner.shape[0], rank=8)
    writer = torch.randn(N, 96, generator=generator) * 0.1
    writer[7] *= 20.0  # writes the outlier channel
    terms.append(RotationTerm("writer", WRITER, writer, factor, floor))
    return terms


def _start() -> torch.Tensor:
    rotation = randomized_hadamard(N, 0)
    assert rotation is not None
    return rotation.matrix


def test_learning_lowers_the_loss_below_the_hadamard_start_and_stays_orthogonal() -> None:
    spec = QuantSpec(bits=3, group_size=32, sym=True)
    learned = learn_rotation(_outlier_model(), _start(), spec, steps=60, lr=5e-3, seed=1, row_fraction=0.5)
    assert learned.steps == 60 and learned.matrix.dtype == torch.float64
    assert learned.loss_end < 0.97 * learned.loss_start  # a real improvement, not rounding
    eye = torch.eye(N, dtype=torch.float64)
    assert float((learned.matrix @ learned.matrix.T - eye).abs().max()) <= 1e-12
    assert not torch.allclose(learned.matrix, _start(), atol=1e-3)


def test_the_same_seed_gives_the_same_matrix_and_another_seed_does_not() -> None:
    spec = QuantSpec(bits=4, group_size=32, sym=False)
    runs = [
        learn_rotation(_outlier_model(), _start(), spec, steps=5, lr=5e-3, seed=seed, row_fraction=0.25)
        for seed in (3, 3, 4)
    ]
    assert runs[0].matrix.numpy().tobytes() == runs[1].matrix.numpy().tobytes()
    assert runs[0].loss_end == runs[1].loss_end
    assert not torch.equal(runs[0].matrix, runs[2].matrix)


def test_zero_steps_return_the_start_and_bad_shapes_are_named() -> None:
    spec = QuantSpec(bits=4, group_size=32)
    kept = learn_rotation(_outlier_model(), _start(), spec, steps=0, lr=1e-3, seed=0)
    assert torch.equal(kept.matrix, _start()) and kept.loss_end == kept.loss_start > 0
    bad = RotationTerm("q_proj", READER, torch.zeros(8, 32), torch.zeros(32, 2), 0.0)
    with pytest.raises(ShapeError, match=r"term q_proj: .*residual width 64"):
        learn_rotation([bad], _start(), spec, steps=1, lr=1e-3, seed=0)
    with pytest.raises(ShapeError, match="gram_factor"):
        gram_factor(torch.zeros(3, 4))
