"""Per-module specs in the GPTQ family (GPTQ on AWQ-scaled weights included) and RTN: a module is solved and
packed at its own width, the rest as before; sharded solves agree; the spec map is part of the identity; methods
without it refuse it."""

from __future__ import annotations

import numpy as np
import pytest
from loop_helpers import assert_packed_roundtrip
from qalgos.gptaq import AsymmetricSpec
from qalgos.spec import QuantSpec
from qlooper import ProcessorError, quantize_model
from qlooper.executor import LocalShardExecutor
from qlooper.loop import LoopOptions
from qlooper.processors.registry import make_processor
from toy_models import DENSE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)
OWN = {
    "model.layers.1.self_attn.q_proj": QuantSpec(bits=8, group_size=32),  # shares its input with k/v at 4 bits
    "model.layers.2.mlp.down_proj": QuantSpec(bits=3, group_size=32),
    "model.layers.3.mlp.gate_proj": QuantSpec(bits=2, group_size=16),
}


def _same_packed(one, other, names) -> None:
    for name in names:
        mine, theirs = one.modules[name].tensors(), other.modules[name].tensors()
        assert mine.keys() == theirs.keys(), name
        for key, value in mine.items():
            assert np.array_equal(value, theirs[key]), (name, key)


@pytest.mark.parametrize("method", ["gptq", "rtn"])
def test_modules_get_their_own_width_and_the_rest_is_unchanged(method: str) -> None:
    cal = toy_calibration()
    model = ToyDecoder()
    processor = make_processor(method, SPEC, module_specs=OWN)
    run = quantize_model(model, DENSE, cal, SPEC, processor, format="gptq")
    for name, done in run.modules.items():
        own = OWN.get(name, SPEC)
        assert (done.weight.bits, done.weight.group_size) == (own.bits, own.group_size), name
    assert_packed_roundtrip(run, model)
    rows = {row.module: row for row in run.report}
    assert rows["model.layers.1.self_attn.q_proj"].bits == 8 and rows["model.layers.1.self_attn.k_proj"].bits == 4
    # layer 0 comes before any override: it is bit for bit the run without overrides
    plain = quantize_model(ToyDecoder(), DENSE, cal, SPEC, method)
    _same_packed(run, plain, [n for n in run.modules if n.startswith("model.layers.0.")])
    # k/v share the accumulator q_proj's 8-bit solve reads (same layer inputs): their solves are the plain ones
    _same_packed(run, plain, ["model.layers.1.self_attn.k_proj", "model.layers.1.self_attn.v_proj"])
    assert processor.describe()["module_specs"]["model.layers.1.self_attn.q_proj"]["bits"] == 8
    assert "module_specs" not in make_processor(method, SPEC).describe()


@pytest.mark.parametrize("workers", [2, 3])
def test_sharded_solves_match_in_process_with_module_specs(workers: int) -> None:
    """One job per module: q_proj's 8-bit solve and k/v's 4-bit ones run at once from one formed Hessian."""
    cal = toy_calibration(n=6, batch_size=2)
    ref = quantize_model(ToyDecoder(), DENSE, cal, SPEC, make_processor("gptq", SPEC, module_specs=OWN), format="gptq")
    run = quantize_model(
        ToyDecoder(),
        DENSE,
        cal,
        SPEC,
        make_processor("gptq", SPEC, module_specs=OWN),
        format="gptq",
        options=LoopOptions(executor=LocalShardExecutor(workers)),
    )
    _same_packed(ref, run, list(ref.modules))
    assert [(row.module, row.loss, row.damp) for row in ref.report] == [(r.module, r.loss, r.damp) for r in run.report]


def test_awq_gptq_solves_modules_at_their_own_width() -> None:
    """GPTQ on AWQ-scaled weights: each module at its own width (the AWQ search keeps the run's spec); the layers
    before any override are bit for bit the run without overrides."""
    cal = toy_calibration()
    model = ToyDecoder()
    processor = make_processor("awq_gptq", SPEC, module_specs=OWN)
    run = quantize_model(model, DENSE, cal, SPEC, processor, format="gptq")
    for name, done in run.modules.items():
        own = OWN.get(name, SPEC)
        assert (done.weight.bits, done.weight.group_size) == (own.bits, own.group_size), name
    assert_packed_roundtrip(run, model)
    plain = quantize_model(ToyDecoder(), DENSE, cal, SPEC, "awq_gptq")
    _same_packed(run, plain, [n for n in run.modules if n.startswith("model.layers.0.")])
    assert processor.describe()["module_specs"]["model.layers.2.mlp.down_proj"]["bits"] == 3


def test_gptaq_takes_module_specs() -> None:
    terms = AsymmetricSpec("gptaq", 0.25)
    run = quantize_model(
        ToyDecoder(), DENSE, toy_calibration(), SPEC, make_processor("gptaq", SPEC, terms, module_specs=OWN),
        format="gptq",
    )  # fmt: skip
    assert run.modules["model.layers.2.mlp.down_proj"].weight.bits == 3


@pytest.mark.parametrize("method", ["awq", "qqq"])
def test_methods_without_per_module_specs_refuse_them(method: str) -> None:
    with pytest.raises(ProcessorError, match=rf"module_specs: method {method!r} quantizes every module with one spec"):
        make_processor(method, SPEC, module_specs=OWN)
    make_processor(method, SPEC, module_specs={})  # nothing to refuse
