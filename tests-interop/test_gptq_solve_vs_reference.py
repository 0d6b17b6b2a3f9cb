"""qalgos' GPTQ solve against GPT-QModel 7.7.0's own ``GPTQ`` class on the same layer and activations.

Both are driven directly (weights ``[192, 576]``, 576 inputs as in SmolLM2, so group 128 leaves a partial
last group of 64; activations with a few outlier channels). Where the two define the same computation the
dequantized weights agree to float32 rounding (at most 0.1% of entries a code apart where a weight sits on a
rounding tie, and the same Hessian-weighted error to 0.1%): natural order and group-aware order (GAR, the reference's
default) at group 128, with and without symmetry. One documented difference: at a group size smaller than
the lazy-update block (128 columns) the reference computes a group that starts inside a block from weights
that do not yet carry the errors of that block's earlier columns; qalgos computes every group's parameters
from fully updated columns. There the two results differ while their Hessian-weighted errors stay within
1% of each other (checked, both ways), and both are far below round-to-nearest's.
"""

from __future__ import annotations

import pytest
import torch
from qalgos.gptq import GPTQ
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec
from torch import nn

OUT, IN = 192, 576


def _layer() -> tuple[torch.Tensor, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(OUT, IN, generator=gen) * 0.02
    boost = 1 + 5 * (torch.rand(IN, generator=gen) > 0.95)
    batches = [torch.randn(256, IN, generator=gen) * boost for _ in range(4)]
    return weight, batches


def _reference(weight: torch.Tensor, batches: list[torch.Tensor], **kwargs: object) -> torch.Tensor:
    from gptqmodel import QuantizeConfig
    from gptqmodel.quantization.gptq import GPTQ as ReferenceGPTQ

    linear = nn.Linear(IN, OUT, bias=False)
    linear.weight.data = weight.clone()
    task = ReferenceGPTQ(module=linear, qcfg=QuantizeConfig(bits=4, **kwargs))
    task.quantizer.configure(perchannel=True)
    for x in batches:
        task.add_batch(x[None], None)
    return task.quantize()[0]


def _ours(weight: torch.Tensor, batches: list[torch.Tensor], **kwargs: object) -> torch.Tensor:
    task = GPTQ(IN, QuantSpec(bits=4, **kwargs))  # type: ignore[arg-type]
    for x in batches:
        task.add_batch(x[None])
    return task.quantize(weight).dequantized


def _error(q: torch.Tensor, weight: torch.Tensor, batches: list[torch.Tensor]) -> float:
    """``trace((Q - W) H (Q - W)ᵀ)`` with ``H = Σ xᵀx``: the layer-output error GPTQ minimizes."""
    hessian = sum(x.T @ x for x in batches)
    diff = (q - weight).double()
    return float(torch.einsum("oi,ij,oj->", diff, hessian.double(), diff))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"group_size": 128, "sym": True, "act_group_aware": False},
        {"group_size": 128, "sym": True, "act_group_aware": True},
        {"group_size": 128, "sym": False, "act_group_aware": True},
        {"group_size": -1, "sym": True, "act_group_aware": False},
    ],
    ids=["g128-natural", "g128-gar", "g128-gar-asym", "per-channel"],
)
def test_same_computation_gives_the_same_weights(kwargs: dict[str, object]) -> None:
    weight, batches = _layer()
    ours, reference = _ours(weight, batches, **kwargs), _reference(weight, batches, **kwargs)
    # Equal to float32 rounding: the two sum the same products in a different order (and the CPU's SIMD width
    # changes the order again), so a weight that sits on a rounding tie may take the neighbouring code.
    # Measured: identical on an AVX2 CPU; on an AVX-512 one 54 of 110592 entries one step apart (group-aware).
    differ = ~torch.isclose(ours, reference, rtol=0, atol=1e-6)
    assert float(differ.float().mean()) <= 1e-3, f"{int(differ.sum())} of {differ.numel()} entries differ"
    ours_err, ref_err = _error(ours, weight, batches), _error(reference, weight, batches)
    assert abs(ours_err - ref_err) <= 1e-3 * ref_err, (ours_err, ref_err)


@pytest.mark.parametrize("kwargs", [{"group_size": 64, "sym": True}, {"group_size": 32, "sym": False}])
def test_groups_inside_a_block_differ_by_design_and_match_in_quality(kwargs: dict[str, object]) -> None:
    weight, batches = _layer()
    kwargs = {**kwargs, "act_group_aware": False}
    ours, reference = _ours(weight, batches, **kwargs), _reference(weight, batches, **kwargs)
    assert not torch.allclose(ours, reference, atol=1e-6)  # the documented difference is real
    ours_err, ref_err = _error(ours, weight, batches), _error(reference, weight, batches)
    assert abs(ours_err - ref_err) <= 0.01 * ref_err
    spec = QuantSpec(bits=4, group_size=int(kwargs["group_size"]), sym=bool(kwargs["sym"]))  # type: ignore[call-overload]
    rtn_err = _error(quantize_rtn(weight, spec).dequantized, weight, batches)
    assert ours_err < 0.9 * rtn_err
