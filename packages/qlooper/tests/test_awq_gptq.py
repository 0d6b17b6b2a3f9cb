"""GPTQ on AWQ-scaled weights (``awq_gptq``): equal to a hand-assembled reference (AWQ's scale search and fold,
then qalgos' GPTQ on each scaled weight with the Hessian of the scaled inputs, group by group as GPTQ sequences
them), plain GPTQ where AWQ cannot scale, deterministic, sharded = in-process, resumable, its own identity."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from loop_helpers import assert_packed_roundtrip, assert_resumes_bit_identical, expected_modules, output_error
from qalgos.awq import (
    fold_scales_into_previous,
    fold_scales_into_quantized,
    scale_consumer_weight,
    search_scales,
)
from qalgos.awq_gram import search_scales_gram
from qalgos.fallback import FallbackPolicy
from qalgos.gptq import GPTQ
from qalgos.spec import QuantSpec
from qlooper import GroupSpec, LoopOptions, ModelDefinition, ProcessorError, quantize_model
from qlooper.executor import LocalShardExecutor
from qlooper.identity import build_identity
from qlooper.loop import LayerLoop
from qlooper.processors.registry import make_processor
from toy_models import DENSE, MOE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32, sym=True, act_group_aware=True, mse=2.0, scale_dtype="float16")


def _set(module: torch.nn.Module, name: str, value: torch.Tensor) -> None:
    with torch.no_grad():
        getattr(module, name).copy_(value)


def reference_run(layers: int, spec: QuantSpec) -> tuple[dict[str, Any], ToyDecoder]:
    """The variant assembled by hand from qalgos on ``ToyDecoder(layers)``: per layer, per group in order, a
    forward of the current (partly quantized) layer captures the group's inputs; AWQ's search gives the scales;
    they are folded (into an already-solved previous linear's stored rows when there is one); GPTQ solves each
    scaled weight from the scaled inputs and the dequantized weight replaces it. Returns (results, model)."""
    model = ToyDecoder(layers=layers)
    calibration = toy_calibration()
    search_spec = QuantSpec(bits=spec.bits, group_size=spec.group_size, sym=spec.sym, scale_dtype=spec.scale_dtype)
    inputs: list[tuple[torch.Tensor, dict[str, Any]]] = []
    first = model.model.layers[0].register_forward_pre_hook(
        lambda _m, args, kwargs: inputs.append((args[0], dict(kwargs))), with_kwargs=True
    )
    with torch.no_grad():
        for batch in calibration.batches:
            model(batch.input_ids, batch.attention_mask)
    first.remove()
    masks = [batch.attention_mask.bool() for batch in calibration.batches]
    results: dict[str, Any] = {}
    owners: dict[int, str] = {}
    for index, layer in enumerate(model.model.layers):
        prefix = f"model.layers.{index}."
        for group in DENSE.groups:
            mods = [layer.get_submodule(name) for name in group.modules]
            xs: list[torch.Tensor] = []
            calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
            current: list[torch.Tensor] = []
            hooks = [
                mods[0].register_forward_hook(lambda _m, a, _o, xs=xs, cur=current: xs.append(a[0][cur[0]].float()))
            ]
            inspect = layer.get_submodule(group.inspect) if group.inspect else None
            if inspect is not None:
                hooks.append(
                    inspect.register_forward_pre_hook(
                        lambda _m, a, k, calls=calls: calls.append((a, dict(k))), with_kwargs=True
                    )
                )
            with torch.no_grad():
                for (hidden, kwargs), mask in zip(inputs, masks, strict=True):
                    current[:] = [mask]
                    layer(hidden, **kwargs)
            for hook in hooks:
                hook.remove()
            x = torch.cat(xs)
            weights = [m.weight.detach().clone() for m in mods]
            if inspect is None:
                scales = search_scales_gram(x, weights, search_spec).scales
            else:

                def forward_with(trial: list[torch.Tensor], mods=mods, inspect=inspect, calls=calls, weights=weights):
                    for m, w in zip(mods, trial, strict=True):
                        _set(m, "weight", w)
                    with torch.no_grad():
                        outs = [inspect(*a, **k) for a, k in calls]
                    for m, w in zip(mods, weights, strict=True):
                        _set(m, "weight", w)
                    outs = [o[0] if isinstance(o, tuple) else o for o in outs]
                    return torch.cat([o.reshape(-1, o.shape[-1]).float() for o in outs])

                scales = search_scales(x, weights, forward_with, search_spec).scales
            prev = layer.get_submodule(group.prev_op)
            new_weight, new_bias = fold_scales_into_previous(prev.weight.detach(), getattr(prev, "bias", None), scales)
            _set(prev, "weight", new_weight)
            if new_bias is not None:
                _set(prev, "bias", new_bias)
            solved = owners.get(id(prev))
            if solved is not None:  # a linear solved earlier in this layer: fold into its stored rows
                results[solved] = fold_scales_into_quantized(results[solved], scales)
                _set(prev, "weight", results[solved].dequantized)
            task = GPTQ(x.shape[1], spec)
            task.add_batch(x / scales)
            for name, m in zip(group.modules, mods, strict=True):
                result = task.quantize(scale_consumer_weight(m.weight.detach(), scales))
                _set(m, "weight", result.dequantized)
                results[prefix + name] = result
                owners[id(m)] = prefix + name
        with torch.no_grad():
            inputs = [(layer(hidden, **kwargs)[0], kwargs) for hidden, kwargs in inputs]
    return results, model


def test_modules_equal_the_hand_assembled_reference() -> None:
    want, ref_model = reference_run(2, SPEC)
    model = ToyDecoder(layers=2)
    run = quantize_model(model, DENSE, toy_calibration(), SPEC, "awq_gptq")
    assert run.format == "gptq" and list(run.modules) == list(want)
    for name, done in run.modules.items():
        got, ref = done.weight, want[name].weight
        np.testing.assert_array_equal(got.g_idx, ref.g_idx, err_msg=name)
        assert float(np.mean(got.codes == ref.codes)) > 0.999, name  # float32 rounding may move a tie
        np.testing.assert_allclose(got.dequantize(), ref.dequantize(), rtol=1e-3, atol=1e-5, err_msg=name)
    for name, tensor in ref_model.state_dict().items():  # folded norms and biases, installed weights
        torch.testing.assert_close(model.state_dict()[name], tensor, rtol=1e-3, atol=1e-5, msg=name)
    v_proj = run.report_for("model.layers.0.self_attn.v_proj").notes
    assert "rows_scaled_for=self_attn.o_proj" in v_proj and "solver=gptq" in v_proj
    assert "rows_scaled_for=mlp.down_proj" in run.report_for("model.layers.1.mlp.up_proj").notes
    assert all(row.method == "awq_gptq" and "scale_ratio=" in row.notes for row in run.report)


def test_unscalable_groups_get_plain_gptq_and_the_run_packs() -> None:
    groups = list(DENSE.groups)
    groups[1] = GroupSpec(("self_attn.o_proj",))  # no prev_op
    groups[3] = GroupSpec(("mlp.down_proj",), prev_op="self_attn.v_proj")  # width 64 != 128
    definition = ModelDefinition("model.layers", tuple(groups), awq_no_clip=DENSE.awq_no_clip)
    model = ToyDecoder()
    run = quantize_model(model, definition, toy_calibration(), SPEC, "awq_gptq")
    assert len(run.modules) == expected_modules()
    assert_packed_roundtrip(run, model)
    o_proj = run.report_for("model.layers.1.self_attn.o_proj").notes
    assert "skipped: no prev_op" in o_proj and "solver=gptq (unscaled)" in o_proj
    down = run.report_for("model.layers.1.mlp.down_proj").notes
    assert "output width 64 != group input width 128" in down and "solver=gptq (unscaled)" in down
    assert "rows_scaled_for" not in run.report_for("model.layers.1.self_attn.v_proj").notes
    assert "scale_ratio=" in run.report_for("model.layers.1.mlp.up_proj").notes
    rtn = ToyDecoder()
    quantize_model(rtn, DENSE, None, SPEC, "rtn")
    assert output_error(model) < output_error(rtn)


def test_moe_experts_get_plain_gptq_and_rarely_routed_ones_fall_back() -> None:
    options = LoopOptions(fallback=FallbackPolicy(min_token_fraction=0.05))
    model = ToyDecoder(moe=True)
    run = quantize_model(model, MOE, toy_calibration(batch_size=1), SPEC, "awq_gptq", options=options)
    assert_packed_roundtrip(run, model)
    fell_back = [row for row in run.report if row.fallback]
    assert fell_back and all(row.fallback == "rtn" and ".experts." in row.module for row in fell_back)
    expert = run.report_for("model.layers.0.mlp.experts.0.up_proj").notes
    assert "skipped: modules do not share one input" in expert and "solver=gptq (unscaled)" in expert
    assert "scale_ratio=" in run.report_for("model.layers.0.self_attn.q_proj").notes


def _tensors(run) -> dict[str, np.ndarray]:
    return {f"{name}/{key}": value for name, done in run.modules.items() for key, value in done.tensors().items()}


def _assert_same(a, b) -> None:
    ta, tb = _tensors(a), _tensors(b)
    assert ta.keys() == tb.keys()
    for key, value in ta.items():
        assert value.dtype == tb[key].dtype and np.array_equal(value, tb[key]), key


def test_deterministic_and_sharded_equals_in_process() -> None:
    cal = toy_calibration()
    first = quantize_model(ToyDecoder(), DENSE, cal, SPEC, "awq_gptq")
    _assert_same(first, quantize_model(ToyDecoder(), DENSE, cal, SPEC, "awq_gptq"))
    for workers in (2, 3):  # 3: q/k/v's solves (one job per module) in one wave
        executor = LocalShardExecutor(workers)
        sharded = LoopOptions(executor=executor)
        _assert_same(first, quantize_model(ToyDecoder(), DENSE, cal, SPEC, "awq_gptq", options=sharded))
        assert all(t.solve_jobs == 7 for t in executor.times)
    on_cpu = LoopOptions(device="cpu")
    _assert_same(first, quantize_model(ToyDecoder(), DENSE, cal, SPEC, "awq_gptq", options=on_cpu))


def test_resumes_bit_identical(tmp_path: Path) -> None:
    run = quantize_model(ToyDecoder(), DENSE, toy_calibration(), QuantSpec(bits=4, group_size=32), "awq_gptq")
    assert_resumes_bit_identical(tmp_path, "awq_gptq", run)


def test_identity_names_the_variant_and_compute_dtype_is_refused() -> None:
    def identity(method: str) -> dict[str, Any]:
        model = ToyDecoder()
        loop = LayerLoop(model, DENSE, make_processor(method, SPEC), format="gptq", options=LoopOptions())
        return build_identity(model, DENSE, toy_calibration(), loop.processor, "gptq", loop.options, loop.state.plan)

    described = identity("awq_gptq")["processor"]
    assert described["method"] == "awq_gptq" and described["search_tokens"] == 4096
    assert described != identity("gptq")["processor"]
    with pytest.raises(ProcessorError, match=r"compute_dtype=bfloat16: method 'awq_gptq'"):
        options = LoopOptions(compute_dtype="bfloat16")
        quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, "awq_gptq", options=options)
