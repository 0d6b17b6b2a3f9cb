"""The compute device and the compute dtype (qlooper.placement): the same code path on every device, the
default numbers on the CPU, bfloat16 forwards with float32 statistics and solves, named errors before work.

The device parameter is ``cpu`` everywhere; ``cuda`` is added only when ``LOWBIT_REQUIRE_CUDA=1`` (the ``gpu``
nox session), where a machine without CUDA fails instead of skipping."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from loop_helpers import assert_resumes_bit_identical
from qalgos.spec import QuantSpec
from qlooper import LoopOptions, ProcessorError, quantize_model
from qlooper.devices import DeviceError, available_devices, default_device, resolve_compute_dtype, resolve_device
from qlooper.executor import LocalShardExecutor
from qlooper.identity import build_identity
from qlooper.loop import LayerLoop
from toy_models import DENSE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)
DEVICES = ["cpu", *(["cuda"] if os.environ.get("LOWBIT_REQUIRE_CUDA") == "1" else [])]


def _run(lockstep: bool = True, **options):
    model = ToyDecoder()
    options = LoopOptions(lockstep=lockstep, **options)
    run = quantize_model(model, DENSE, toy_calibration(), SPEC, "gptq", options=options)
    return model, run


@pytest.fixture(scope="module")
def default_runs():
    return {lockstep: _run(lockstep) for lockstep in (True, False)}


def _codes_agree(run, other) -> float:
    """Fraction of equal codes over every module of two runs."""
    same = total = 0
    for name, done in run.modules.items():
        a, b = done.weight.codes, other.modules[name].weight.codes
        same, total = same + int((a == b).sum()), total + a.size
    return same / total


def _where(model: torch.nn.Module) -> set[tuple[str, torch.dtype]]:
    return {(t.device.type, t.dtype) for t in (*model.parameters(), *model.buffers())}


@pytest.mark.parametrize("lockstep", [True, False])
@pytest.mark.parametrize("device", DEVICES)
def test_a_device_gives_the_default_numbers(default_runs, device: str, lockstep: bool) -> None:
    model, run = _run(lockstep, device=device)
    ref_model, ref = default_runs[lockstep]
    assert _where(model) == {("cpu", torch.float32)}  # every layer moved back
    assert run.modules.keys() == ref.modules.keys()
    if device == "cpu":  # the same code path as the default, bit for bit
        for name, done in run.modules.items():
            for key, value in done.tensors().items():
                assert np.array_equal(value, ref.modules[name].tensors()[key]), (name, key)
        for a, b in zip(model.state_dict().values(), ref_model.state_dict().values(), strict=True):
            assert torch.equal(a, b)
    else:  # GPU GEMMs round differently: the same solution up to ties
        assert _codes_agree(run, ref) > 0.99
    for row, ref_row in zip(run.report, ref.report, strict=True):
        assert row.tokens == ref_row.tokens
        assert row.loss == pytest.approx(ref_row.loss, rel=1e-6 if device == "cpu" else 1e-3)


@pytest.mark.parametrize("device", DEVICES)
def test_bfloat16_forwards_keep_float32_statistics_and_masters(default_runs, device: str) -> None:
    ref = default_runs[True][1]
    source = ToyDecoder().state_dict()
    model, run = _run(True, device=device, compute_dtype="bfloat16")
    assert _where(model) == {("cpu", torch.float32)}
    for name, tensor in model.state_dict().items():  # dense tensors: the float32 originals, bit for bit
        if not any(name.startswith(m) for m in run.modules):
            assert torch.equal(tensor, source[name]), name
    for name, done in run.modules.items():  # quantized modules hold their float32 reconstruction
        got = model.get_submodule(name).weight.detach().numpy()
        assert np.allclose(got, done.weight.dequantize(), atol=1e-6), name
    assert 0.8 < _codes_agree(run, ref) < 1.0  # bfloat16 activations change the Hessians a little
    losses = np.array([r.loss for r in run.report]) / np.array([r.loss for r in ref.report])
    assert np.all(np.abs(losses - 1) < 0.1), losses
    _, per_group = _run(False, device=device, compute_dtype="bfloat16")  # lockstep and per-group agree
    for name, done in run.modules.items():
        assert np.array_equal(done.tensors()["qweight"], per_group.modules[name].tensors()["qweight"]), name


def test_float32_compute_dtype_is_the_default_path(default_runs) -> None:
    _, run = _run(True, compute_dtype="float32")
    for name, done in run.modules.items():
        assert np.array_equal(done.tensors()["qweight"], default_runs[True][1].modules[name].tensors()["qweight"])


def test_the_solve_reads_the_master_weight_not_its_bfloat16_rounding() -> None:
    from qlooper import GPTQProcessor

    solved: list[torch.dtype] = []
    after: list[torch.dtype] = []

    class Recording(GPTQProcessor):
        def process(self, ctx, group):
            solved.extend(m.weight.dtype for m in group.modules)
            return super().process(ctx, group)

    class Probe:
        def on_layer_done(self, step, layer) -> None:
            after.extend({p.dtype for p in layer.parameters()})

    options = LoopOptions(compute_dtype=torch.bfloat16, extensions=(Probe(),))
    quantize_model(ToyDecoder(), DENSE, toy_calibration(), None, Recording(SPEC), format="gptq", options=options)
    assert set(solved) == {torch.float32} and len(solved) == 7 * 4
    assert set(after) == {torch.float32}  # extensions see the layer back in float32


def test_compute_dtype_is_part_of_identity_and_the_device_is_not() -> None:
    model = ToyDecoder()
    cal = toy_calibration()

    def identity(**options):
        loop = LayerLoop(model, DENSE, _gptq(), format="gptq", options=LoopOptions(**options))
        return build_identity(model, DENSE, cal, loop.processor, "gptq", loop.options, loop.state.plan)

    base = identity()
    assert "compute_dtype" not in base["loop"]
    assert identity(compute_dtype="float32") == base
    assert identity(device="cpu") == base
    assert identity(compute_dtype="bfloat16")["loop"]["compute_dtype"] == "bfloat16"
    assert identity(compute_dtype=torch.float16)["loop"]["compute_dtype"] == "float16"


def _gptq():
    from qlooper import GPTQProcessor

    return GPTQProcessor(SPEC)


def test_bfloat16_runs_resume_bit_identical(tmp_path: Path) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the worker runs with one thread
    try:
        torch.manual_seed(1234)
        _, run = _run(True, compute_dtype="bfloat16")
    finally:
        torch.set_num_threads(threads)
    assert_resumes_bit_identical(tmp_path, "gptq-bf16", run)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("foo", ["device: 'foo' is not a device name", "available here: cpu"]),
        ("cuda:7", ["device: 'cuda:7'", "available here: cpu"]),
        ("cpu:1", ["device: 'cpu:1' does not exist", "available here: cpu"]),
        ("meta", ["device: 'meta' is a 'meta' device; qlooper runs on cpu or cuda"]),
    ],
)
def test_a_device_that_does_not_exist_is_refused_before_any_work(value: str, words: list[str]) -> None:
    model = ToyDecoder()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(DeviceError) as err:
        quantize_model(model, DENSE, toy_calibration(), SPEC, "gptq", options=LoopOptions(device=value))
    for word in words:
        assert word in str(err.value)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_cuda_is_named_with_what_this_machine_has() -> None:
    if torch.cuda.is_available():  # the gpu session
        assert resolve_device("cuda", argument="--device").type == "cuda"
        assert default_device().type == "cuda"
        assert available_devices()[1:] == [f"cuda:{i}" for i in range(torch.cuda.device_count())]
        return
    with pytest.raises(DeviceError, match=r"--device: 'cuda' needs CUDA, and torch.cuda.is_available\(\) is False"):
        resolve_device("cuda", argument="--device")
    assert default_device() == torch.device("cpu")
    assert available_devices() == ["cpu"]


def test_compute_dtype_choices_and_refusals() -> None:
    assert resolve_compute_dtype(None) is torch.float32
    assert resolve_compute_dtype("bfloat16") is torch.bfloat16
    assert resolve_compute_dtype(torch.float16) is torch.float16
    with pytest.raises(DeviceError, match=r"--compute-dtype: expected one of float32, bfloat16, float16, found 'int8'"):
        resolve_compute_dtype("int8", argument="--compute-dtype")
    with pytest.raises(ProcessorError, match=r"compute_dtype=bfloat16: method 'awq'"):
        options = LoopOptions(compute_dtype="bfloat16")
        quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, "awq", options=options)
    with pytest.raises(ProcessorError, match=r"only the in-process executor"):
        options = LoopOptions(compute_dtype="bfloat16", executor=LocalShardExecutor(2))
        quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, "gptq", options=options)
