"""AWQ end to end: scales folded into the previous op (function preserved), clip search, gemm packing."""

import dataclasses

import torch
from loop_helpers import assert_packed_roundtrip, expected_modules, output_error
from qalgos.spec import QuantSpec
from qlooper import GroupSpec, LoopOptions, ModelDefinition, quantize_model
from toy_models import DENSE, ToyDecoder, toy_calibration

SPEC4 = QuantSpec(bits=4, group_size=32, sym=False)


def relative_error(model: torch.nn.Module, reference: torch.nn.Module) -> float:
    num = den = 0.0
    with torch.no_grad():
        for b in toy_calibration().batches:
            ref = reference(b.input_ids, b.attention_mask)
            num += float(((model(b.input_ids, b.attention_mask) - ref) ** 2).sum())
            den += float((ref**2).sum())
    return num / den


def test_awq_end_to_end_packs_gemm_and_beats_rtn() -> None:
    model = ToyDecoder()
    norm_before = model.model.layers[0].input_layernorm.weight.detach().clone()
    run = quantize_model(model, DENSE, toy_calibration(), SPEC4, "awq")
    assert run.format == "gemm" and len(run.modules) == expected_modules()
    assert_packed_roundtrip(run, model)
    assert not torch.equal(model.model.layers[0].input_layernorm.weight, norm_before)  # scales were folded
    for row in run.report:
        assert "scale_ratio=" in row.notes, row.module
        assert row.tokens == toy_calibration().total_tokens and row.method == "awq"
    q = run.report_for("model.layers.0.self_attn.q_proj").notes
    assert "clip_search=skipped (awq_no_clip)" in q
    assert "clip_search" not in run.report_for("model.layers.0.mlp.down_proj").notes
    rtn = ToyDecoder()
    quantize_model(rtn, DENSE, None, SPEC4, "rtn")
    assert output_error(model) < output_error(rtn)


def test_scale_folding_preserves_the_float_function() -> None:
    """At 8 bits quantization error is tiny, so any folding mistake would dominate the output error."""
    model = ToyDecoder()
    run = quantize_model(model, DENSE, toy_calibration(), QuantSpec(bits=8, group_size=32, sym=False), "awq")
    assert all("scale_ratio=" in r.notes for r in run.report)
    assert relative_error(model, ToyDecoder()) < 2e-5


def test_norm_weight_offset_is_respected() -> None:
    spec = QuantSpec(bits=8, group_size=32, sym=False)
    offset_def = dataclasses.replace(DENSE, norm_weight_offset=1.0)
    good = ToyDecoder(norm_offset=1.0)
    quantize_model(good, offset_def, toy_calibration(), spec, "awq")
    wrong = ToyDecoder(norm_offset=1.0)
    quantize_model(wrong, DENSE, toy_calibration(), spec, "awq")
    reference = ToyDecoder(norm_offset=1.0)
    assert relative_error(good, reference) < 2e-5 < relative_error(wrong, reference)


def test_groups_without_a_foldable_prev_op_skip_the_scale_search() -> None:
    groups = list(DENSE.groups)
    groups[1] = GroupSpec(("self_attn.o_proj",))  # no prev_op
    groups[3] = GroupSpec(("mlp.down_proj",), prev_op="self_attn.v_proj")  # width 64 != 128
    definition = ModelDefinition("model.layers", tuple(groups), awq_no_clip=DENSE.awq_no_clip)
    run = quantize_model(ToyDecoder(), definition, toy_calibration(), SPEC4, "awq")
    assert "skipped: no prev_op" in run.report_for("model.layers.1.self_attn.o_proj").notes
    assert "output width 64 != group input width 128" in run.report_for("model.layers.1.mlp.down_proj").notes
    assert "scale_ratio=" in run.report_for("model.layers.1.mlp.up_proj").notes


def test_awq_with_true_sequential_off_keeps_each_groups_own_inputs() -> None:
    model = ToyDecoder()
    run = quantize_model(model, DENSE, toy_calibration(), SPEC4, "awq", options=LoopOptions(true_sequential=False))
    assert len(run.modules) == expected_modules()
    assert_packed_roundtrip(run, model)
    assert all("scale_ratio=" in r.notes for r in run.report)
    rtn = ToyDecoder()
    quantize_model(rtn, DENSE, None, SPEC4, "rtn")
    assert output_error(model) < output_error(rtn)
