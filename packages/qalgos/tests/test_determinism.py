"""Same inputs, same bits: across runs and across torch thread counts."""

from __future__ import annotations

import pytest
import torch
from conftest import correlated_activations
from qalgos.gptq import GPTQ
from qalgos.spec import QuantSpec


def solve_once(threads: int, spec: QuantSpec):
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        w = torch.randn(96, 256, generator=torch.Generator().manual_seed(11))
        gptq = GPTQ(256, spec)
        for chunk in correlated_activations(1200, 256, seed=3).split(300):
            gptq.add_batch(chunk)
        return gptq.quantize(w)
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize("kwargs", [{}, {"desc_act": True, "sym": False}])
def test_bit_identical_across_runs_and_thread_counts(kwargs: dict) -> None:
    spec = QuantSpec(bits=4, group_size=64, **kwargs)
    first = solve_once(1, spec)
    again = solve_once(1, spec)
    threaded = solve_once(2, spec)
    assert first.weight.equals(again.weight) and first.loss == again.loss
    assert first.weight.equals(threaded.weight) and first.loss == threaded.loss
    assert torch.equal(first.dequantized, threaded.dequantized)
