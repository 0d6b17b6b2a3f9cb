"""The RTN noise-to-signal ratio a sensitivity pass measures, and GPTQ solves of one accumulator under several
specs (``with_spec``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from conftest import correlated_activations
from qalgos.errors import ShapeError, StateError
from qalgos.gptq import GPTQ
from qalgos.rtn import quantize_rtn
from qalgos.sensitivity import rtn_noise_to_signal
from qalgos.spec import QuantSpec

SPEC = QuantSpec(bits=4, group_size=32, scale_dtype="float16")


def test_noise_to_signal_is_the_power_weighted_rtn_error_over_the_output_power(weight: torch.Tensor) -> None:
    power = torch.rand(weight.shape[1], generator=torch.Generator().manual_seed(3)) * 4
    deq = quantize_rtn(weight, replace(SPEC, scale_dtype="float32")).dequantized
    noise = float((((weight - deq).double() ** 2).sum(dim=0) * power.double()).sum())
    signal = float(((weight.double() ** 2).sum(dim=0) * power.double()).sum())
    assert rtn_noise_to_signal(weight, power, SPEC) == pytest.approx(noise / signal, rel=1e-9)
    # free of the activations' and the weights' scale: deeper layers' larger residual stream does not count
    assert rtn_noise_to_signal(weight * 8, power * 100, SPEC) == pytest.approx(noise / signal, rel=1e-6)
    assert rtn_noise_to_signal(weight, torch.zeros_like(power), SPEC) == 0.0
    ratios = [rtn_noise_to_signal(weight, power, replace(SPEC, bits=b)) for b in (2, 3, 4, 8)]
    assert ratios == sorted(ratios, reverse=True) and ratios[-1] < ratios[0] / 100 and ratios[0] < 1
    with pytest.raises(ShapeError, match="input_power"):
        rtn_noise_to_signal(weight, power[:-1], SPEC)


def test_with_spec_solves_the_shared_statistics_as_a_fresh_solver_would(weight: torch.Tensor) -> None:
    x = correlated_activations(512, weight.shape[1])
    shared = GPTQ(weight.shape[1], SPEC)
    shared.add_batch(x)
    assert shared.with_spec(SPEC) is shared
    for other in (replace(SPEC, bits=8), replace(SPEC, bits=3), replace(SPEC, group_size=16, desc_act=True)):
        fresh = GPTQ(weight.shape[1], other)
        fresh.add_batch(x)
        expected = fresh.quantize(weight)
        got = shared.with_spec(other).quantize(weight)
        assert got.weight.bits == other.bits and got.weight.group_size == other.group_size
        assert torch.equal(got.dequantized, expected.dequantized) and got.loss == expected.loss
    # the base solve is untouched by the views, and widths that order alike share one factorisation
    base = shared.quantize(weight)
    fresh = GPTQ(weight.shape[1], SPEC)
    fresh.add_batch(x)
    assert torch.equal(base.dequantized, fresh.quantize(weight).dequantized)
    assert len(shared._factors) == 2  # {group 32 natural order} and {group 16 act-order}


def test_a_view_releases_the_statistics_it_shares(weight: torch.Tensor) -> None:
    shared = GPTQ(weight.shape[1], SPEC)
    shared.add_batch(correlated_activations(256, weight.shape[1]))
    shared.quantize(weight)
    shared.with_spec(replace(SPEC, bits=8)).quantize(weight, release_statistics=True)
    with pytest.raises(StateError, match="released"):
        shared.quantize(weight)
