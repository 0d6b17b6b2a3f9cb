"""EoRA over GPTQ through the loop on the toy decoder: every module gets an adapter that lowers the layer
output error, the model then tracks the float model better than GPTQ alone, lockstep and per-group
forwards agree, and a stopped run resumes to bit-identical codes and adapters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from loop_helpers import expected_modules, output_error
from qalgos.spec import QuantSpec
from qlooper import GPTQProcessor, LoopOptions, ProcessorError, quantize_model
from qlooper.processors.eora import EoRAProcessor
from toy_models import DENSE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=3, group_size=32)
WORKER = Path(__file__).with_name("resume_worker.py")


@pytest.fixture(scope="module")
def eora_run():
    model = ToyDecoder()
    processor = EoRAProcessor(GPTQProcessor(SPEC), 4)
    run = quantize_model(model, DENSE, toy_calibration(), SPEC, processor, format="gptq")
    return model, run, processor


def test_every_module_gets_an_adapter_and_the_model_improves(eora_run) -> None:
    model, run, processor = eora_run
    assert len(processor.adapters) == expected_modules() == len(run.modules)
    modules = dict(model.named_modules())
    for name, adapter in processor.adapters.items():
        assert adapter.a.shape[0] == 4 and adapter.b.shape == (modules[name].weight.shape[0], 4)
        dense = modules[name].weight.detach()
        expected = torch.from_numpy(run.modules[name].weight.dequantize()) + adapter.delta()
        assert torch.allclose(dense, expected, atol=1e-6), name  # the loop continued with Q + B A
    assert all(r.notes and "eora_rank=4" in r.notes for r in run.report)
    plain = ToyDecoder()
    quantize_model(plain, DENSE, toy_calibration(), SPEC, "gptq")
    assert output_error(model) < output_error(plain)


def test_lockstep_and_group_forwards_agree(eora_run) -> None:
    _, run, processor = eora_run
    other = EoRAProcessor(GPTQProcessor(SPEC), 4)
    options = LoopOptions(lockstep=False)
    again = quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, other, format="gptq", options=options)
    for name, adapter in processor.adapters.items():
        assert again.modules[name].weight.equals(run.modules[name].weight), name
        assert torch.allclose(other.adapters[name].delta(), adapter.delta(), atol=1e-6), name


def test_bad_rank_is_named() -> None:
    with pytest.raises(ProcessorError, match=r"adapter\.rank"):
        EoRAProcessor(GPTQProcessor(SPEC), 0)


def test_stopped_eora_run_resumes_bit_identical(tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    outs = {}
    for label, chain in (("straight", (("none", 0),)), ("resumed", (("sigterm@2", 3), ("none", 0)))):
        root = tmp_path / label
        for fault, expected in chain:
            args = [sys.executable, str(WORKER), "gptq+eora", str(root / "ckpt"), str(root / "out.npz"), fault]
            proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600)  # hang guard only
            assert proc.returncode == expected, proc.stderr[-3000:]
        outs[label] = np.load(root / "out.npz")
    assert json.loads((tmp_path / "resumed" / "out.npz.json").read_text())["resumed_from"] == 2
    straight, resumed = outs["straight"], outs["resumed"]
    assert sorted(straight.files) == sorted(resumed.files) and any(k.endswith("eora.a") for k in straight.files)
    for key in straight.files:
        assert np.array_equal(straight[key], resumed[key]), key
