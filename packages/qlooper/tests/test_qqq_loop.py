"""QQQ through the loop on the toy decoder: every module packs to the reference's QQQ tensors and unpacks to
its logical weight, grouped QQQ solves GPTQ's codes on layer 0, lockstep changes nothing, a stopped run
resumes bit-identical."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from loop_helpers import assert_resumes_bit_identical, expected_modules, output_error
from qalgos.qqq import qqq_spec
from qformats.layouts.qqq import QQQWeight, infer_meta, unpack_qqq, validate_qqq
from qlooper import LoopOptions, ProcessorError, QQQProcessor, quantize_model
from toy_models import DENSE, ToyDecoder, toy_calibration


@pytest.fixture(scope="module")
def run():
    model = ToyDecoder()
    return quantize_model(model, DENSE, toy_calibration(), qqq_spec(32), "qqq"), model


def test_qqq_end_to_end(run) -> None:
    result, model = run
    assert result.format == "qqq" and len(result.modules) == expected_modules()
    modules = dict(model.named_modules())
    for name, done in result.modules.items():
        weight = done.weight
        assert isinstance(weight, QQQWeight) and weight.group_size == 32, name
        tensors = done.tensors()
        meta = infer_meta(tensors, group_size=32)
        assert not validate_qqq(tensors, meta), name
        assert np.array_equal(unpack_qqq(tensors, meta).dequantize(), weight.dequantize()), name
        assert np.array_equal(modules[name].weight.detach().numpy(), weight.dequantize()), name
    assert all(r.method == "qqq" and r.damp == pytest.approx(0.005) for r in result.report)
    assert output_error(model) < 0.05


def test_layer0_grouped_codes_are_gptq_codes(run) -> None:
    """Layer 0's first group reads the embeddings on both paths: QQQ's codes are GPTQ's at the same damping
    and order (later groups read outputs of QQQ's int8-rounded weights, so they may differ)."""
    result, _ = run
    spec = qqq_spec(32)
    gptq = quantize_model(ToyDecoder(layers=1), DENSE, toy_calibration(), spec, "gptq")
    for name in ("model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj"):
        assert np.array_equal(result.modules[name].weight.codes, gptq.modules[name].weight.codes), name


def test_per_channel_and_lockstep_agree() -> None:
    spec = qqq_spec(-1)
    a = quantize_model(ToyDecoder(layers=2), DENSE, toy_calibration(), spec, QQQProcessor(spec), format="qqq")
    b = quantize_model(ToyDecoder(layers=2), DENSE, toy_calibration(), spec, "qqq", options=LoopOptions(lockstep=False))
    for name, done in a.modules.items():
        assert done.weight.s_group is None and int(done.weight.codes.min()) >= 1, name
        assert all(np.array_equal(v, b.modules[name].tensors()[k]) for k, v in done.tensors().items()), name


def test_non_qqq_spec_is_refused() -> None:
    from qalgos.errors import SpecError
    from qalgos.spec import QuantSpec

    with pytest.raises(SpecError, match="sym"):
        QQQProcessor(QuantSpec(bits=4, group_size=32, sym=False))
    with pytest.raises(ProcessorError, match="'qqq'"):
        quantize_model(ToyDecoder(layers=1), DENSE, toy_calibration(), qqq_spec(32), "qqqq")


def test_stopped_qqq_run_resumes_bit_identical(tmp_path: Path, run) -> None:
    result, _ = run
    assert_resumes_bit_identical(tmp_path, "qqq", result)
