"""ParoQuant through the loop on the 4-layer toy decoder: every module packed in the ``paroquant`` layout and
held by the model as its dense equivalent, lower output error than min/max quantization at the same bits and
group, and a stopped run (another process) resumed bit-identical to an uninterrupted one."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from loop_helpers import assert_resumes_bit_identical, expected_modules, output_error
from qalgos.spec import QuantSpec
from qformats.layouts.paroquant import infer_meta, unpack_paroquant
from qlooper import ProcessorError, quantize_model
from qlooper.api import make_processor
from toy_models import DENSE, PARO_SPEC, ToyDecoder, toy_calibration


@pytest.fixture(scope="module")
def run():
    model = ToyDecoder()
    return quantize_model(model, DENSE, toy_calibration(), PARO_SPEC, "paroquant"), model


def test_paroquant_end_to_end(run) -> None:
    result, model = run
    assert result.format == "paroquant" and len(result.modules) == expected_modules()
    modules = dict(model.named_modules())
    for name, done in result.modules.items():
        tensors = done.tensors()
        back = unpack_paroquant(tensors, infer_meta(tensors, group_size=32))
        assert np.array_equal(back.dequantize(), done.weight.dequantize()), name
        assert np.array_equal(modules[name].weight.detach().numpy(), done.weight.dequantize()), name
        assert not done.weight.is_identity(), name
    rows = result.report
    assert all(r.method == "paroquant" and r.fallback is None and np.isfinite(r.loss) for r in rows)
    assert all("identity_loss=" in r.notes and r.tokens > 0 for r in rows)


def test_lower_error_than_min_max_quantization(run) -> None:
    _, model = run
    plain = ToyDecoder()
    quantize_model(plain, DENSE, None, QuantSpec(bits=4, group_size=32, sym=False), "rtn")
    assert output_error(model) < output_error(plain)


def test_method_needs_a_paro_spec() -> None:
    with pytest.raises(ProcessorError, match="ParoSpec"):
        make_processor("paroquant", QuantSpec(bits=4, group_size=32))


def test_stopped_paroquant_run_resumes_bit_identical(tmp_path: Path, run) -> None:
    first, _ = run
    assert_resumes_bit_identical(tmp_path, "paroquant", first)
