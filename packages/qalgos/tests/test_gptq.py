"""GPTQ: equals RTN on an identity Hessian, beats RTN on correlated data, orderings, g_idx, resume."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import correlated_activations, outlier_activations, output_error, run_gptq
from qalgos.errors import ShapeError
from qalgos.gptq import GPTQ
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec

ORDERINGS = [
    {},
    {"desc_act": True},
    {"desc_act": True, "static_groups": True},
    {"act_group_aware": True},
    {"static_groups": True},
    {"act_group_aware": True, "static_groups": True},
]


@pytest.mark.parametrize(
    "kwargs",
    [
        *ORDERINGS,
        {"group_size": -1},
        {"group_size": 24, "sym": False},
        {"sym": False, "mse": 2.4},
        {"scale_dtype": "float16", "desc_act": True},
    ],
)
def test_identity_hessian_gives_rtn(weight: torch.Tensor, kwargs: dict) -> None:
    spec = QuantSpec(bits=4, **{"group_size": 32, **kwargs})
    result = run_gptq(weight, torch.eye(96), spec)
    assert result.weight.equals(quantize_rtn(weight, spec).weight)
    assert result.damp == spec.damp_percent and result.fallback is None


@pytest.mark.parametrize("bits", [2, 3, 4])
def test_gptq_beats_rtn_on_correlated_activations(bits: int) -> None:
    w = torch.randn(64, 128, generator=torch.Generator().manual_seed(1))
    x = correlated_activations(1024, 128)
    spec = QuantSpec(bits=bits, group_size=32)
    gptq = output_error(x, w, run_gptq(w, x, spec).dequantized)
    rtn = output_error(x, w, quantize_rtn(w, spec).dequantized)
    assert gptq < 0.7 * rtn


def test_act_order_helps_with_outlier_channels() -> None:
    w = torch.randn(64, 128, generator=torch.Generator().manual_seed(2))
    x, _ = outlier_activations(1024, 128, outliers=6, gain=20.0)
    errors = {}
    for name, kwargs in (("natural", {}), ("desc_act", {"desc_act": True}), ("gar", {"act_group_aware": True})):
        result = run_gptq(w, x, QuantSpec(bits=3, group_size=32, **kwargs))
        errors[name] = output_error(x, w, result.dequantized)
    assert errors["desc_act"] < 0.9 * errors["natural"]
    assert errors["gar"] < errors["natural"]


@pytest.mark.parametrize("kwargs", [*ORDERINGS, {"group_size": -1, "desc_act": True}])
@pytest.mark.parametrize("in_features", [96, 100])
def test_g_idx_is_valid_for_every_ordering(kwargs: dict, in_features: int) -> None:
    spec = QuantSpec(bits=4, **{"group_size": 32, **kwargs})
    w = torch.randn(16, in_features, generator=torch.Generator().manual_seed(3))
    x, _ = outlier_activations(256, in_features)
    qw = run_gptq(w, x, spec).weight
    width = spec.group_width(in_features)
    counts = np.bincount(qw.g_idx, minlength=qw.num_groups)
    expected = [min(width, in_features - g * width) for g in range(spec.groups(in_features))]
    assert counts.tolist() == expected  # every group full except possibly one partial group
    if not spec.desc_act or spec.static_groups:
        assert qw.has_default_g_idx()
    elif spec.group_size != -1:
        assert not qw.has_default_g_idx()  # act-order really permuted the groups
        diag = torch.diagonal(x.T @ x)
        first_group = np.flatnonzero(qw.g_idx == 0)
        assert set(first_group.tolist()) == set(torch.argsort(diag, descending=True, stable=True)[:width].tolist())


def test_partial_last_group_and_dequantize_consistency() -> None:
    w = torch.randn(24, 70, generator=torch.Generator().manual_seed(4))
    x = correlated_activations(300, 70)
    for kwargs in [*ORDERINGS, {"scale_dtype": "float16", "bits": 3}, {"mse": 2.0, "sym": False}]:
        kwargs = {"bits": 4, **kwargs}
        spec = QuantSpec(group_size=32, **kwargs)
        result = run_gptq(w, x, spec)
        assert result.weight.scales.shape == (3, 24)
        assert result.weight.scales.dtype == np.dtype(spec.scale_dtype)
        assert torch.equal(torch.from_numpy(result.weight.dequantize()), result.dequantized)


def test_block_size_changes_nothing_but_rounding() -> None:
    w = torch.randn(32, 128, generator=torch.Generator().manual_seed(5))
    x = correlated_activations(512, 128)
    results = [run_gptq(w, x, QuantSpec(bits=4, group_size=16, block_size=b)) for b in (16, 40, 128)]
    for other in results[1:]:
        same = (results[0].weight.codes == other.weight.codes).mean()
        assert same > 0.995


def textbook_gptq(w: torch.Tensor, h: torch.Tensor, spec: QuantSpec) -> torch.Tensor:
    """Column-by-column GPTQ without blocking (float64), natural order, group params at group starts."""
    from qalgos.group_params import codes_of, dequant_of, gptq_params

    w = w.to(torch.float64).clone()
    h = h.to(torch.float64).clone()
    h.diagonal().add_(spec.damp_percent * torch.diagonal(h).mean())
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    q = torch.zeros_like(w)
    for j in range(w.shape[1]):
        if j % spec.group_size == 0:
            scale, zero = gptq_params(w[:, j : j + spec.group_size].float(), spec)
        col = w[:, j].float()
        q[:, j] = dequant_of(codes_of(col, scale, zero, spec.maxq), scale, zero).double()
        err = (w[:, j] - q[:, j]) / u[j, j]
        w[:, j + 1 :] -= err[:, None] * u[j, j + 1 :][None, :]
    return q.float()


def test_blocked_solve_matches_the_textbook_algorithm() -> None:
    w = torch.randn(32, 64, generator=torch.Generator().manual_seed(6))
    x = correlated_activations(400, 64)
    spec = QuantSpec(bits=4, group_size=16, block_size=32)
    gptq = GPTQ(64, spec)
    gptq.add_batch(x)
    ours = gptq.quantize(w).dequantized
    reference = textbook_gptq(w, gptq.hessian(), spec)
    # Same decisions; scales may differ in the last bit (float64 vs float32 order), so compare closely.
    assert torch.isclose(ours, reference, rtol=1e-5, atol=1e-7).float().mean() > 0.99


def test_masked_tokens_are_excluded() -> None:
    x = correlated_activations(2 * 50, 40).reshape(2, 50, 40)
    mask = torch.rand(2, 50, generator=torch.Generator().manual_seed(0)) > 0.3
    masked, kept = GPTQ(40, QuantSpec(bits=4)), GPTQ(40, QuantSpec(bits=4))
    assert masked.add_batch(x, mask) == int(mask.sum())
    kept.add_batch(x[mask])
    assert masked.nsamples == kept.nsamples == int(mask.sum())
    assert torch.equal(masked.hessian(), kept.hessian())


def test_dead_columns_quantize_to_zero() -> None:
    w = torch.randn(8, 64, generator=torch.Generator().manual_seed(8))
    x = correlated_activations(200, 64)
    x[:, [3, 40]] = 0.0
    result = run_gptq(w, x, QuantSpec(bits=4, group_size=32, desc_act=True))
    assert bool((result.dequantized[:, [3, 40]] == 0).all())


def test_damping_increases_until_cholesky_succeeds() -> None:
    # Tokens [2, 2] and [0, 0]: H = 2/2 * [[4, 4], [4, 4]] is singular and its Cholesky pivot is exactly 0.
    spec = QuantSpec(bits=4, group_size=-1, damp_percent=0.0, damp_auto_increment=0.01)
    gptq = GPTQ(2, spec)
    gptq.add_batch(torch.tensor([[2.0, 2.0], [0.0, 0.0]]))
    result = gptq.quantize(torch.tensor([[0.3, -0.2], [0.1, 0.5]]))
    assert result.damp == pytest.approx(0.01)
    assert result.weight.meta["damp"] == result.damp and result.fallback is None


def test_unusable_hessian_falls_back_to_rtn_with_reason(weight: torch.Tensor) -> None:
    gptq = GPTQ(96, QuantSpec(bits=4, group_size=32))
    gptq.load_state_dict({"hessian_sum": torch.full((96, 96), float("nan")), "nsamples": 10, "in_features": 96})
    result = gptq.quantize(weight)
    assert result.fallback is not None and "Hessian unusable" in result.fallback
    assert result.weight.equals(quantize_rtn(weight, QuantSpec(bits=4, group_size=32)).weight)
    assert result.damp is None and result.nsamples == 10


def test_no_tokens_falls_back_and_policy_is_honoured(weight: torch.Tensor) -> None:
    from qalgos.fallback import FallbackPolicy

    spec = QuantSpec(bits=4, group_size=32)
    gptq = GPTQ(96, spec)
    assert gptq.quantize(weight).fallback == "no calibration token reached this module"
    gptq.add_batch(correlated_activations(4, 96))
    assert gptq.quantize(weight).fallback is None
    few = gptq.quantize(weight, total_tokens=10_000, policy=FallbackPolicy())
    assert few.fallback is not None and "4 of 10000" in few.fallback
    assert gptq.quantize(weight, total_tokens=100, policy=FallbackPolicy()).fallback is None


def test_resume_from_state_dict_gives_identical_bits(weight: torch.Tensor) -> None:
    spec = QuantSpec(bits=4, group_size=32, desc_act=True)
    x = correlated_activations(300, 96)
    one = GPTQ(96, spec)
    one.add_batch(x[:150])
    one.add_batch(x[150:])
    first = GPTQ(96, spec)
    first.add_batch(x[:150])
    resumed = GPTQ(96, spec)
    resumed.load_state_dict(first.state_dict())
    resumed.add_batch(x[150:])
    assert resumed.nsamples == 300
    assert resumed.quantize(weight).weight.equals(one.quantize(weight).weight)


def test_bad_inputs_are_named(weight: torch.Tensor) -> None:
    gptq = GPTQ(96, QuantSpec(bits=4))
    with pytest.raises(ShapeError, match="x: expected"):
        gptq.add_batch(torch.zeros(3, 95))
    with pytest.raises(ShapeError, match="mask"):
        gptq.add_batch(torch.zeros(2, 3, 96), torch.ones(3, dtype=torch.bool))
    gptq.add_batch(torch.ones(2, 96))
    with pytest.raises(ShapeError, match="weight"):
        gptq.quantize(torch.zeros(4, 95))
    from qalgos.errors import StateError

    with pytest.raises(StateError, match="in_features"):
        gptq.load_state_dict({"hessian_sum": torch.zeros(4, 4), "nsamples": 1, "in_features": 4})


def test_modules_sharing_a_hessian_share_one_factorisation(weight: torch.Tensor, monkeypatch) -> None:
    import qalgos.gptq as gptq_module

    calls = []
    real = gptq_module.damped_inverse
    monkeypatch.setattr(gptq_module, "damped_inverse", lambda *a, **k: calls.append(1) or real(*a, **k))
    spec = QuantSpec(bits=4, group_size=32)
    x = correlated_activations(300, 96)
    shared = GPTQ(96, spec)
    shared.add_batch(x)
    first = shared.quantize(weight)
    second = shared.quantize(weight * 0.5, release_statistics=True)
    assert len(calls) == 1
    alone = GPTQ(96, spec)
    alone.add_batch(x)
    assert alone.quantize(weight * 0.5).weight.equals(second.weight)
    assert first.weight.scales.tolist() != second.weight.scales.tolist()
    shared_again = GPTQ(96, spec)
    shared_again.add_batch(x[:100])
    shared_again.quantize(weight)
    shared_again.add_batch(x[100:])  # new statistics: the factor is recomputed
    fresh = GPTQ(96, spec)
    fresh.add_batch(x[:100])
    fresh.hessian()  # the same flush points as shared_again
    fresh.add_batch(x[100:])
    assert shared_again.quantize(weight).weight.equals(fresh.quantize(weight).weight) and len(calls) == 5


@pytest.mark.parametrize("kwargs", [*ORDERINGS, {"group_size": -1, "sym": False}, {"bits": 8, "mse": 2.4}])
def test_a_solver_of_the_formed_hessian_gives_the_accumulators_bits(weight: torch.Tensor, kwargs: dict) -> None:
    """What a sharded executor's worker solves from (qlooper's per-module jobs): the float32 Hessian and the token
    count, formed once; every module's result equals the accumulating solver's, and the given Hessian is kept."""
    spec = QuantSpec(**{"bits": 4, "group_size": 32, **kwargs})
    x = correlated_activations(300, 96)
    x[:, 5] = 0.0  # a dead column: the solve changes its Hessian copy there
    accumulating = GPTQ(96, spec)
    accumulating.add_batch(x[:130])
    accumulating.add_batch(x[130:])
    formed = accumulating.hessian()
    given = formed.clone()
    for w in (weight, weight * 0.5):
        solver = GPTQ.from_hessian(given, accumulating.nsamples, spec)
        mine, theirs = solver.quantize(w, release_statistics=True), accumulating.quantize(w)
        assert mine.weight.equals(theirs.weight) and torch.equal(mine.dequantized, theirs.dequantized)
        assert (mine.loss, mine.damp, mine.nsamples) == (theirs.loss, theirs.damp, theirs.nsamples)
    assert torch.equal(given, formed)  # the solve worked on its own copy
    released = GPTQ(96, spec)
    released.add_batch(x)
    assert torch.equal(released.hessian(release=True), formed)  # frees the sum while forming the same values


def test_a_formed_hessian_takes_no_batches_and_names_bad_input(weight: torch.Tensor) -> None:
    from qalgos.errors import StateError

    spec = QuantSpec(bits=4, group_size=32)
    empty = GPTQ.from_hessian(torch.zeros(96, 96), 0, spec)
    assert empty.quantize(weight).fallback == "no calibration token reached this module"
    solver = GPTQ.from_hessian(torch.eye(96), 10, spec)
    with pytest.raises(StateError, match="no more batches"):
        solver.add_batch(torch.ones(2, 96))
    with pytest.raises(StateError, match="no resumable state"):
        solver.state_dict()
    solver.quantize(weight, release_statistics=True)
    with pytest.raises(StateError, match="released"):
        solver.quantize(weight)
    with pytest.raises(ShapeError, match="hessian: expected a square"):
        GPTQ.from_hessian(torch.zeros(96, 95), 10, spec)
    with pytest.raises(ShapeError, match="hessian: expected float32"):
        GPTQ.from_hessian(torch.eye(96, dtype=torch.float64), 10, spec)
