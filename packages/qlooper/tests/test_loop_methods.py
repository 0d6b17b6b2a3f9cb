"""End to end on the 4-layer toy decoder: RTN (no forwards), GPTQ, loop options, replacement, reports."""

import json

import numpy as np
import pytest
import torch
from loop_helpers import assert_packed_roundtrip, expected_modules, output_error
from qalgos.spec import QuantSpec
from qformats.errors import UnsupportedLayoutError
from qlooper import FinalizedModule, LoopOptions, ProcessorError, quantize_model
from torch import nn
from toy_models import DENSE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)


@pytest.fixture(scope="module")
def gptq_run():
    model = ToyDecoder()
    model.train()
    seen = []
    model.model.layers[1].register_forward_pre_hook(lambda m, a: seen.append(m.training))
    run = quantize_model(model, DENSE, toy_calibration(), SPEC, "gptq")
    assert seen and not any(seen) and model.training  # forwards in eval mode, the flag restored after
    return model, run


def test_rtn_runs_no_forward_and_packs_every_module() -> None:
    model = ToyDecoder()
    calls = []
    for layer in model.model.layers:
        layer.register_forward_pre_hook(lambda *a: calls.append(1))
    run = quantize_model(model, DENSE, toy_calibration(), SPEC, "rtn")
    assert not calls
    assert len(run.modules) == expected_modules() and len(run.report) == expected_modules()
    assert_packed_roundtrip(run, model)
    assert all(r.method == "rtn" and r.tokens == 0 and r.format == "gptq" for r in run.report)


def test_gptq_end_to_end(gptq_run) -> None:
    model, run = gptq_run
    assert len(run.modules) == expected_modules()
    assert_packed_roundtrip(run, model)
    total = toy_calibration().total_tokens
    for row in run.report:
        assert row.tokens == total and row.damp is not None and np.isfinite(row.loss) and row.fallback is None
        assert row.seconds > 0 and row.finalize_seconds > 0
    rtn_model = ToyDecoder()
    quantize_model(rtn_model, DENSE, None, SPEC, "rtn")
    assert output_error(model) < output_error(rtn_model)


def test_early_stop_does_not_change_results(gptq_run) -> None:
    _, run = gptq_run
    model = ToyDecoder()
    other = quantize_model(model, DENSE, toy_calibration(), SPEC, "gptq", options=LoopOptions(early_stop=False))
    for name, done in run.modules.items():
        assert done.weight.equals(other.modules[name].weight), name


def test_true_sequential_off_collects_on_the_float_layer(gptq_run) -> None:
    _, run = gptq_run
    model = ToyDecoder()
    flat = quantize_model(model, DENSE, toy_calibration(), SPEC, "gptq", options=LoopOptions(true_sequential=False))
    q = "model.layers.0.self_attn.q_proj"
    assert flat.modules[q].weight.equals(run.modules[q].weight)  # first group: same inputs either way
    o = "model.layers.0.self_attn.o_proj"
    assert not flat.modules[o].weight.equals(run.modules[o].weight)  # o_proj saw float q/k/v instead


class DequantLinear(nn.Module):
    """A test-only stand-in for a quantized linear: dequantizes the logical weight on the fly."""

    def __init__(self, done: FinalizedModule) -> None:
        super().__init__()
        self.register_buffer("w", torch.from_numpy(done.weight.dequantize()))
        self.bias = None if done.bias is None else torch.from_numpy(done.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.w.T
        return y if self.bias is None else y + self.bias


def test_replace_module_callback_swaps_modules(gptq_run) -> None:
    dense_model, _ = gptq_run
    model = ToyDecoder()
    seen = []

    def replace(name: str, module: nn.Module, done: FinalizedModule) -> nn.Module:
        seen.append(name)
        assert isinstance(module, nn.Linear)
        return DequantLinear(done)

    quantize_model(model, DENSE, toy_calibration(), SPEC, "gptq", options=LoopOptions(replace_module=replace))
    assert len(seen) == expected_modules()
    assert isinstance(model.model.layers[2].mlp.down_proj, DequantLinear)
    assert isinstance(model.model.layers[0].self_attn.v_proj, DequantLinear)
    b = toy_calibration().batches[0]
    with torch.no_grad():
        assert torch.allclose(
            model(b.input_ids, b.attention_mask), dense_model(b.input_ids, b.attention_mask), atol=1e-5
        )


def test_finalizer_failure_stops_the_loop_with_its_error() -> None:
    model = ToyDecoder()
    original_last = model.model.layers[3].mlp.down_proj.weight.detach().clone()

    def replace(name: str, module: nn.Module, done: FinalizedModule) -> None:
        if name == "model.layers.1.self_attn.k_proj":
            raise OSError("disk full while replacing k_proj")

    with pytest.raises(OSError, match="disk full while replacing k_proj"):
        quantize_model(model, DENSE, toy_calibration(), SPEC, "rtn", options=LoopOptions(replace_module=replace))
    assert torch.equal(model.model.layers[3].mlp.down_proj.weight, original_last)  # the loop stopped early


def test_offload_writes_modules_and_reads_them_back(tmp_path) -> None:
    model = ToyDecoder()
    run = quantize_model(model, DENSE, None, SPEC, "rtn", options=LoopOptions(offload_dir=tmp_path))
    done = run.modules["model.layers.0.self_attn.v_proj"]
    assert done.packed is None and done.offload_path == tmp_path / done.name / "module.safetensors"
    assert done.offload_path.is_file() and done.bias is not None
    assert_packed_roundtrip(run, model)


def test_report_files_and_progress(tmp_path, capsys) -> None:
    run = quantize_model(ToyDecoder(), DENSE, None, SPEC, "rtn", options=LoopOptions(progress=True))
    lines = run.write_report(tmp_path / "log.csv").read_text().splitlines()
    assert lines[0].startswith("layer,module,method,format,bits,group_size,loss,tokens,damp")
    assert len(lines) == 1 + expected_modules()
    rows = json.loads(run.write_report(tmp_path / "log.json").read_text())
    assert rows[5]["module"] == run.report[5].module and rows[5]["bits"] == 4
    with pytest.raises(ValueError, match=r"\.csv or \.json"):
        run.write_report(tmp_path / "log.txt")
    err = capsys.readouterr().err
    assert "4/4 layers" in err and "eta" in err


def test_bad_arguments_fail_before_work() -> None:
    model = ToyDecoder()
    with pytest.raises(ProcessorError, match="needs calibration data"):
        quantize_model(model, DENSE, None, SPEC, "gptq")
    with pytest.raises(UnsupportedLayoutError, match="nope"):
        quantize_model(model, DENSE, None, SPEC, "rtn", format="nope")
    with pytest.raises(ProcessorError, match="method"):
        quantize_model(model, DENSE, None, SPEC, "sgd")
    with pytest.raises(ProcessorError, match="spec"):
        quantize_model(model, DENSE, None, None, "rtn")
    assert torch.equal(
        model.model.layers[0].self_attn.q_proj.weight, ToyDecoder().model.layers[0].self_attn.q_proj.weight
    )


def test_modules_are_listed_in_solve_order_whatever_order_finalizers_finish() -> None:
    import time

    def slow_first(name: str, module: nn.Module, done: FinalizedModule) -> None:
        if name.endswith("q_proj"):  # the first module solved in each layer finishes last
            time.sleep(0.2)

    model = ToyDecoder()
    run = quantize_model(model, DENSE, None, SPEC, "rtn", options=LoopOptions(replace_module=slow_first))
    assert list(run.modules) == [row.module for row in run.report]
    assert run.report[0].module.endswith("q_proj")  # the slow finalizer was the first submitted
