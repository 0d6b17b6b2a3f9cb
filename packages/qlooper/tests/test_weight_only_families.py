"""Weight-only families (FP8, bitsandbytes NF4 and int8, GGUF) on the calibration-free path, with resume."""

from pathlib import Path

import numpy as np
import pytest
import torch
from qalgos.weight_only import WeightOnlySpec
from qcheckpoint import CheckpointConfig
from qformats.layouts.bnb import unpack_bnb4
from qformats.layouts.gguf import unpack_gguf
from qlooper import ProcessorError, quantize_model
from toy_models import DENSE, ToyDecoder

SPECS = {
    "fp8": WeightOnlySpec("fp8"),
    "bnb4": WeightOnlySpec("bnb4", quant_type="nf4"),
    "int8": WeightOnlySpec("int8"),
    "gguf": WeightOnlySpec("gguf", gguf_type="Q4_0"),
}


@pytest.mark.parametrize("family", sorted(SPECS))
def test_family_quantizes_packs_and_resumes(family: str, tmp_path: Path) -> None:
    spec = SPECS[family]
    model = ToyDecoder()
    config = CheckpointConfig(path=tmp_path / "ckpt")
    run = quantize_model(model, DENSE, None, spec, family, checkpoint=config)
    assert run.format == family and len(run.modules) == 28
    modules = dict(model.named_modules())
    for name, done in run.modules.items():
        dense = modules[name].weight.detach().numpy()
        assert np.array_equal(dense, np.asarray(done.weight.dequantize(), dtype=np.float32).reshape(dense.shape))
        assert done.tensors()
    row = run.report[0]
    assert row.method == family and row.bits is None and row.loss is not None and row.loss > 0
    q = run.modules["model.layers.0.self_attn.q_proj"]
    if family == "gguf":
        back = unpack_gguf(q.tensors(), "Q4_0", q.weight.in_features)
        assert np.array_equal(back.qweight, q.weight.qweight)
    if family == "bnb4":
        assert np.array_equal(unpack_bnb4(q.tensors()).dequantize(), q.weight.dequantize())
    again = quantize_model(ToyDecoder(), DENSE, None, spec, family, checkpoint=config)
    assert again.resumed_from == 4
    for name, done in run.modules.items():
        other = again.modules[name]
        assert type(other.weight) is type(done.weight)
        assert np.array_equal(other.weight.dequantize(), done.weight.dequantize())
        assert all(np.array_equal(other.tensors()[k], v) for k, v in done.tensors().items())


def test_weight_only_spec_method_must_match() -> None:
    with pytest.raises(ProcessorError, match="runs as 'fp8'"):
        quantize_model(ToyDecoder(), DENSE, None, SPECS["fp8"], "gptq")
    assert torch.is_tensor(ToyDecoder().model.layers[0].mlp.up_proj.weight)
