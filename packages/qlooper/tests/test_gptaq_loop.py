"""GPTAQ / FOEM through the loop on the 4-layer toy decoder: native inputs are the float model's, alpha = 0
is GPTQ bit for bit, lockstep changes nothing, a stopped run resumes bit-identical, MoE experts refuse."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from loop_helpers import assert_packed_roundtrip, assert_resumes_bit_identical, expected_modules
from qalgos.gptaq import AsymmetricSpec
from qalgos.spec import QuantSpec
from qlooper import GPTAQProcessor, LoopOptions, ProcessorError, quantize_model
from toy_models import DENSE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)


def _same(a, b, name: str) -> bool:
    return a.modules[name].weight.equals(b.modules[name].weight)


@pytest.fixture(scope="module")
def runs():
    gptq = quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, "gptq")
    model = ToyDecoder()
    processor = GPTAQProcessor(SPEC, AsymmetricSpec("gptaq", 0.25))
    gptaq = quantize_model(model, DENSE, toy_calibration(), SPEC, processor, format="gptq")
    return gptq, gptaq, model, processor


def test_gptaq_end_to_end(runs) -> None:
    gptq, gptaq, model, _ = runs
    assert len(gptaq.modules) == expected_modules()
    assert_packed_roundtrip(gptaq, model)
    assert all(r.method == "gptaq" and r.damp is not None and np.isfinite(r.loss) for r in gptaq.report)
    # layer 0's first group reads the embeddings on both paths: dXXT = 0, so GPTQ's codes exactly
    assert _same(gptq, gptaq, "model.layers.0.self_attn.q_proj")
    # later layers read drifted inputs on the quantized path: the P term changes the solve
    assert not _same(gptq, gptaq, "model.layers.2.self_attn.q_proj")
    assert not _same(gptq, gptaq, "model.layers.1.mlp.down_proj")


def test_native_hidden_states_are_the_float_models(runs) -> None:
    """After the run the kept native hidden states are the float model's last-layer outputs."""
    _, _, _, processor = runs
    ref, outs = ToyDecoder(), []
    ref.model.layers[-1].register_forward_hook(lambda _m, _a, out: outs.append(out[0].detach()))
    cal = toy_calibration()
    with torch.no_grad():
        for b in cal.batches:
            ref(b.input_ids, b.attention_mask)
    kept = processor.native.hidden
    assert kept is not None and len(kept) == len(outs)
    for got, want in zip(kept, outs, strict=True):
        assert torch.allclose(got, want, atol=1e-5, rtol=1e-5)


def test_alpha_zero_through_the_loop_is_gptq(runs) -> None:
    gptq = runs[0]
    zero = GPTAQProcessor(SPEC, AsymmetricSpec("foem", 0.0, 0.0))
    run = quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, zero, format="gptq")
    assert all(_same(gptq, run, name) for name in gptq.modules)


def test_lockstep_and_group_forwards_agree(runs) -> None:
    gptaq = runs[1]
    processor = GPTAQProcessor(SPEC, AsymmetricSpec("gptaq", 0.25))
    options = LoopOptions(lockstep=False)
    run = quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, processor, format="gptq", options=options)
    assert all(_same(gptaq, run, name) for name in gptaq.modules)


def test_foem_runs_and_differs_from_gptq(runs) -> None:
    gptq = runs[0]
    run = quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, "foem")
    assert all(r.method == "foem" for r in run.report)
    assert not _same(gptq, run, "model.layers.0.self_attn.q_proj")  # beta acts without native inputs


def test_expert_modules_refuse_alpha() -> None:
    from toy_models import MOE

    processor = GPTAQProcessor(SPEC, AsymmetricSpec("gptaq", 0.25))
    with pytest.raises(ProcessorError, match="token-aligned native"):
        quantize_model(ToyDecoder(moe=True), MOE, toy_calibration(), SPEC, processor, format="gptq")


def test_stopped_gptaq_run_resumes_bit_identical(tmp_path: Path, runs) -> None:
    gptaq = runs[1]
    assert_resumes_bit_identical(tmp_path, "gptaq", gptaq)
