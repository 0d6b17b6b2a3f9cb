"""Weight-only quantizers: each family round-trips through its qformats codec with sensible error."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qalgos.errors import SpecError
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec
from qalgos.weight_only import WeightOnlySpec, quantize_weight_only
from qformats.layouts.bnb import BnB4Weight, BnB8Weight, pack_bnb4, unpack_bnb4
from qformats.layouts.fp8 import FP8Weight
from qformats.layouts.gguf import GGUFWeight


@pytest.fixture
def w() -> torch.Tensor:
    return torch.randn(32, 256, generator=torch.Generator().manual_seed(0)) * 0.05


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        (WeightOnlySpec("fp8"), FP8Weight),
        (WeightOnlySpec("fp8", scale_method="block", block_size=(16, 128)), FP8Weight),
        (WeightOnlySpec("bnb4", quant_type="nf4"), BnB4Weight),
        (WeightOnlySpec("bnb4", quant_type="fp4", block_size=128, compress_statistics=False), BnB4Weight),
        (WeightOnlySpec("int8"), BnB8Weight),
        (WeightOnlySpec("gguf", gguf_type="Q4_0"), GGUFWeight),
        (WeightOnlySpec("gguf", gguf_type="Q4_K"), GGUFWeight),
        (WeightOnlySpec.gguf_for_bits(8), GGUFWeight),
    ],
)
def test_each_family_returns_its_logical_weight(w: torch.Tensor, spec: WeightOnlySpec, kind: type) -> None:
    result = quantize_weight_only(w, spec)
    assert isinstance(result.weight, kind)
    np.testing.assert_array_equal(result.dequantized.numpy(), result.weight.dequantize().reshape(32, 256))
    assert 0 < result.loss < float(w.square().mean()) * 0.05
    assert result.loss == pytest.approx(float((result.dequantized - w).square().mean()), rel=1e-5)


def test_error_ordering_follows_precision(w: torch.Tensor) -> None:
    losses = {
        name: quantize_weight_only(w, spec).loss
        for name, spec in {
            "q8_0": WeightOnlySpec("gguf", gguf_type="Q8_0"),
            "int8": WeightOnlySpec("int8"),
            "fp8": WeightOnlySpec("fp8"),
            "nf4": WeightOnlySpec("bnb4", quant_type="nf4"),
        }.items()
    }
    assert losses["q8_0"] < losses["fp8"] < losses["nf4"]
    assert losses["int8"] < losses["nf4"]
    int4 = quantize_rtn(w, QuantSpec(bits=4, group_size=64)).loss
    assert losses["fp8"] < int4


def test_bf16_input_is_recorded_and_round_trips_through_the_layout(w: torch.Tensor) -> None:
    result = quantize_weight_only(w.to(torch.bfloat16), WeightOnlySpec("bnb4", quant_type="nf4"))
    assert result.dequantized.dtype == torch.bfloat16
    assert result.weight.dtype == "bfloat16"
    again = unpack_bnb4(pack_bnb4(result.weight))
    np.testing.assert_array_equal(again.dequantize(), result.weight.dequantize())


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"family": "awq"}, "family"),
        ({"family": "gguf"}, "gguf_type"),
        ({"family": "gguf", "gguf_type": "Q3_X"}, "gguf_type"),
        ({"family": "bnb4", "quant_type": "int4"}, "quant_type"),
    ],
)
def test_bad_specs_are_named(kwargs: dict, field: str) -> None:
    with pytest.raises(SpecError, match=field):
        WeightOnlySpec(**kwargs)
    with pytest.raises(SpecError, match="bits"):
        WeightOnlySpec.gguf_for_bits(3)
