"""The processor registry: built-ins looked up by method name and spec type, wrong specs refused by name,
a third party's processor registered and run by the loop under its own method name."""

from collections.abc import Iterator

import pytest
import torch
from qalgos.gptaq import AsymmetricSpec
from qalgos.paroquant import ParoSpec
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec
from qalgos.weight_only import WeightOnlySpec
from qlooper import (
    AWQProcessor,
    GPTAQProcessor,
    GPTQProcessor,
    ParoQuantProcessor,
    ProcessorError,
    QQQProcessor,
    WeightOnlyProcessor,
    make_processor,
    processor_entry,
    quantize_model,
    register_processor,
    registered_methods,
    unregister_processor,
)
from qlooper.processors.weight_only import WeightOnlyProcessor as WeightOnlyImpl
from toy_models import DENSE, ToyDecoder

SPEC = QuantSpec(bits=4, group_size=32)


def test_builtins_are_registered_with_their_spec_types() -> None:
    expected = {
        "gptq": QuantSpec,
        "gptaq": QuantSpec,
        "foem": QuantSpec,
        "qqq": QuantSpec,
        "awq": QuantSpec,
        "rtn": QuantSpec,
        "paroquant": ParoSpec,
        "fp8": WeightOnlySpec,
        "bnb4": WeightOnlySpec,
        "int8": WeightOnlySpec,
        "gguf": WeightOnlySpec,
        "weight_only": WeightOnlySpec,
    }
    assert set(expected) <= set(registered_methods())
    assert {name: processor_entry(name).spec_type for name in expected} == expected


def test_lookup_builds_the_methods_processor() -> None:
    assert type(make_processor("gptq", SPEC)) is GPTQProcessor
    assert type(make_processor("awq", SPEC)) is AWQProcessor
    assert type(make_processor("qqq", QuantSpec(bits=4, group_size=128, sym=True))) is QQQProcessor
    rtn = make_processor("rtn", SPEC)
    assert type(rtn) is WeightOnlyProcessor and rtn.method == "rtn"
    gptaq = make_processor("gptaq", SPEC)
    assert type(gptaq) is GPTAQProcessor and gptaq.method == "gptaq"
    foem = make_processor("foem", SPEC, AsymmetricSpec("foem", 0.5, 0.25))
    assert isinstance(foem, GPTAQProcessor) and foem.terms.alpha == 0.5  # type: ignore[attr-defined]
    assert type(make_processor("paroquant", ParoSpec(bits=4, group_size=128))) is ParoQuantProcessor
    fp8 = make_processor("fp8", WeightOnlySpec("fp8"))
    assert type(fp8) is WeightOnlyImpl and fp8.method == "fp8"
    assert make_processor("weight_only", WeightOnlySpec("bnb4")).method == "bnb4"


def test_wrong_spec_type_is_refused_naming_method_and_expected_type() -> None:
    with pytest.raises(ProcessorError, match=r"'gptq' runs with a qalgos QuantSpec, found ParoSpec"):
        make_processor("gptq", ParoSpec(bits=4, group_size=128))
    with pytest.raises(ProcessorError, match=r"'paroquant' runs with a qalgos ParoSpec, found QuantSpec"):
        make_processor("paroquant", SPEC)
    with pytest.raises(ProcessorError, match=r"'fp8' runs with a qalgos WeightOnlySpec, found QuantSpec"):
        make_processor("fp8", SPEC)
    with pytest.raises(ProcessorError, match=r"a WeightOnlySpec\('int8'\) runs as 'int8', found 'fp8'"):
        make_processor("fp8", WeightOnlySpec("int8"))
    with pytest.raises(ProcessorError, match=r"'gptq' takes no alpha/beta terms"):
        make_processor("gptq", SPEC, AsymmetricSpec("gptaq", 0.25))
    with pytest.raises(ProcessorError, match=r"method 'gptaq' got 'foem' terms"):
        make_processor("gptaq", SPEC, AsymmetricSpec("foem", 0.25))
    with pytest.raises(ProcessorError, match=r"expected one of 'gptq'.*found 'sgd'"):
        make_processor("sgd", SPEC)


def test_a_registered_name_is_not_replaced_silently() -> None:
    with pytest.raises(ProcessorError, match="'gptq' is already registered"):
        register_processor("gptq", QuantSpec, GPTQProcessor)
    assert processor_entry("gptq").factory is GPTQProcessor
    with pytest.raises(ProcessorError, match="'nothing' is not registered"):
        unregister_processor("nothing")


class HalfSpec:
    """A third party's spec: scale every weight by ``factor`` (no quantization; visible in the weights)."""

    def __init__(self, factor: float) -> None:
        self.factor = factor


@pytest.fixture
def halving() -> Iterator[list[HalfSpec]]:
    built: list[HalfSpec] = []

    def factory(spec: HalfSpec) -> WeightOnlyProcessor:
        built.append(spec)

        def quantize(weight: torch.Tensor, _spec: object) -> object:
            return quantize_rtn(weight * spec.factor, SPEC)

        return WeightOnlyProcessor(SPEC, quantize=quantize, method="halving")

    register_processor("halving", HalfSpec, factory)
    yield built
    unregister_processor("halving")
    assert "halving" not in registered_methods()


def test_third_party_processor_runs_in_the_loop_by_name(halving: list[HalfSpec]) -> None:
    spec = HalfSpec(0.5)
    model, reference = ToyDecoder(), ToyDecoder()
    run = quantize_model(model, DENSE, None, spec, "halving", format="gptq")  # type: ignore[arg-type]
    assert halving == [spec]
    assert run.report and all(row.method == "halving" and row.format == "gptq" for row in run.report)
    got = model.model.layers[0].mlp.up_proj.weight.detach()
    want = reference.model.layers[0].mlp.up_proj.weight.detach() * 0.5
    assert torch.allclose(got, want, atol=float(want.abs().max()) / 4)  # 4-bit codes of the halved weight
    assert not torch.allclose(got, reference.model.layers[0].mlp.up_proj.weight.detach(), atol=1e-3)
    with pytest.raises(ProcessorError, match=r"'halving' runs with a qalgos HalfSpec, found QuantSpec"):
        quantize_model(ToyDecoder(), DENSE, None, SPEC, "halving", format="gptq")
