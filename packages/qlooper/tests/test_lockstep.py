"""Lockstep forwards: the same numbers as the sequential path, one layer forward per layer, clean failures;
freed heap memory handed back between phases."""

import numpy as np
import pytest
import torch
from qalgos.spec import QuantSpec
from qlooper import LoopOptions, ProcessorError, quantize_model
from qlooper.definition import GroupSpec, ModelDefinition
from torch import nn
from toy_models import DENSE, MOE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)


def _run(lockstep: bool, definition: ModelDefinition = DENSE, moe: bool = False):
    model = ToyDecoder(moe=moe)
    calls = []
    for layer in model.model.layers:
        layer.register_forward_pre_hook(lambda *a: calls.append(1))
    run = quantize_model(model, definition, toy_calibration(), SPEC, "gptq", options=LoopOptions(lockstep=lockstep))
    return model, run, len(calls)


@pytest.fixture(scope="module")
def both():
    return _run(True), _run(False)


def test_lockstep_gives_the_sequential_numbers(both) -> None:
    (model_l, run_l, _), (model_s, run_s, _) = both
    assert run_l.modules.keys() == run_s.modules.keys()
    for name, done in run_l.modules.items():
        other = run_s.modules[name]
        for key, value in done.tensors().items():
            assert np.array_equal(value, other.tensors()[key]), (name, key)
    rows_s = {r.module: r for r in run_s.report}
    for row in run_l.report:
        assert row.tokens == rows_s[row.module].tokens == toy_calibration().total_tokens
        assert row.loss == rows_s[row.module].loss and row.damp == rows_s[row.module].damp
    ids = torch.randint(1, 64, (2, 16), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(model_l(ids), model_s(ids))


def test_lockstep_runs_each_layer_once_per_batch(both) -> None:
    (_, _, calls_l), (_, _, calls_s) = both
    batches, layers, groups = len(toy_calibration().batches), 4, len(DENSE.groups)
    capture = batches * layers  # every layer is entered (its stand-in forward) once per batch to record its call
    assert calls_l == capture + batches * layers  # one forward per batch per layer
    assert calls_s == capture + batches * layers * (groups + 1)  # a capture forward per group plus the replay


def test_expert_groups_keep_the_sequential_path() -> None:
    _, run_l, calls_l = _run(True, MOE, moe=True)
    _, run_s, calls_s = _run(False, MOE, moe=True)
    assert calls_l == calls_s
    for name, done in run_l.modules.items():
        assert np.array_equal(done.tensors()["qweight"], run_s.modules[name].tensors()["qweight"]), name


def test_groups_out_of_forward_order_are_named() -> None:
    swapped = ModelDefinition(
        layers_path="model.layers",
        groups=(DENSE.groups[1], DENSE.groups[0], DENSE.groups[2], DENSE.groups[3]),
        max_length=64,
    )
    with pytest.raises(ProcessorError, match="out of forward order"):
        _run(True, swapped)


def test_an_error_inside_a_forward_stops_every_batch() -> None:
    model = ToyDecoder()
    state = {"calls": 0}

    def fail_on_third(_module, _inputs) -> None:
        state["calls"] += 1
        if state["calls"] == 3:
            raise RuntimeError("boom in the MLP")

    model.model.layers[0].mlp.register_forward_pre_hook(fail_on_third)
    with pytest.raises(RuntimeError, match="boom in the MLP"):
        quantize_model(model, DENSE, toy_calibration(), SPEC, "gptq")
    layer = model.model.layers[0]
    hooked = [n for n, m in layer.named_modules() if m._forward_pre_hooks and m is not layer.mlp]
    assert not hooked  # every pause hook was removed
    with torch.no_grad():  # the unwound forwards left the model usable
        assert torch.isfinite(model(torch.ones(1, 8, dtype=torch.long))).all()


def test_a_group_never_reached_is_named() -> None:
    bad = ModelDefinition(
        layers_path="model.layers",
        groups=(*DENSE.groups, GroupSpec(("self_attn.q_proj2",), optional=True)),
        max_length=64,
    )
    model = ToyDecoder()
    for layer in model.model.layers:  # a linear that exists but the forward never calls
        layer.self_attn.q_proj2 = torch.nn.Linear(32, 32)
    with pytest.raises(ProcessorError, match="finished its forward without reaching group 4"):
        quantize_model(model, bad, toy_calibration(), SPEC, "gptq")


def test_freed_heap_is_returned_on_glibc() -> None:
    import platform

    from qlooper.allocator import release_free_memory

    assert release_free_memory() is (platform.libc_ver()[0] == "glibc")


def test_a_layer_over_the_lockstep_budget_runs_per_group_with_the_same_numbers(both) -> None:
    (_, run_l, _), (_, _, calls_s) = both
    model = ToyDecoder()
    calls = []
    for layer in model.model.layers:
        layer.register_forward_pre_hook(lambda *a: calls.append(1))
    options = LoopOptions(lockstep=True, lockstep_budget=1)
    run = quantize_model(model, DENSE, toy_calibration(), SPEC, "gptq", options=options)
    assert len(calls) == calls_s  # per-group capture forwards plus the replay, as with lockstep=False
    assert sorted(run.lockstep_skipped) == [f"model.layers.{i}" for i in range(4)]
    assert all("lockstep budget" in why for why in run.lockstep_skipped.values())
    for name, done in run.modules.items():
        assert np.array_equal(done.tensors()["qweight"], run_l.modules[name].tensors()["qweight"]), name
    roomy = quantize_model(
        ToyDecoder(), DENSE, toy_calibration(), SPEC, "gptq", options=LoopOptions(lockstep_budget=2**40)
    )
    assert roomy.lockstep_skipped == {}


def test_the_auto_budget_is_the_weights_outside_the_layers_plus_the_largest_layer() -> None:
    from qlooper.lockstep import AUTO_BUDGET_FLOOR, auto_budget, tensor_bytes

    model = ToyDecoder()
    layers = list(model.model.layers)
    outside = tensor_bytes(model) - sum(tensor_bytes(layer) for layer in layers)
    assert outside > 0
    assert auto_budget(model, layers) == max(AUTO_BUDGET_FLOOR, outside + max(map(tensor_bytes, layers)))
    big = nn.Linear(4096, 40000, bias=False, device="meta")  # meta weights count at their dtype's size
    model.extra_head = big
    assert auto_budget(model, layers) == outside + 4096 * 40000 * 4 + max(map(tensor_bytes, layers))


def test_the_default_budget_turns_lockstep_off_only_where_parked_activations_exceed_it(monkeypatch) -> None:
    import qlooper.lockstep as lockstep_module

    assert LoopOptions().lockstep_budget == "auto"
    default = quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, "gptq", options=LoopOptions())
    assert default.lockstep_skipped == {}  # the toy's parked activations are far under 512 MiB
    monkeypatch.setattr(lockstep_module, "AUTO_BUDGET_FLOOR", 0)  # the model's sizes alone decide
    real = lockstep_module.parked_bytes
    for rows, expect_over in ((1, False), (32, True)):
        model = ToyDecoder()
        budget = lockstep_module.auto_budget(model, list(model.model.layers))
        seen: list[int] = []

        def spy(cache, groups, seen=seen):  # the loop's own estimate for each layer
            seen.append(real(cache, groups))
            return seen[-1]

        monkeypatch.setattr("qlooper.loop.parked_bytes", spy)
        run = quantize_model(model, DENSE, toy_calibration(rows), SPEC, "gptq", options=LoopOptions())
        assert len(seen) == 4
        over = {f"model.layers.{i}" for i, need in enumerate(seen) if need > budget}
        assert bool(over) is expect_over, (rows, seen, budget)
        assert set(run.lockstep_skipped) == over
        monkeypatch.setattr("qlooper.loop.parked_bytes", real)
        plain = quantize_model(
            ToyDecoder(), DENSE, toy_calibration(rows), SPEC, "gptq", options=LoopOptions(lockstep_budget=None)
        )
        assert plain.lockstep_skipped == {}
        for name, done in run.modules.items():  # lockstep or not, the same numbers
            assert np.array_equal(done.tensors()["qweight"], plain.modules[name].tensors()["qweight"]), name


def test_a_bad_lockstep_budget_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="lockstep_budget"):
        quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, "gptq", options=LoopOptions(lockstep_budget=-1))
