"""``quantize(device=, compute_dtype=, cache_device=)`` and ``load_quantized(device=)`` on the tiny llama: the
same code path on every device, the default bytes on the CPU, named errors before any work.

The device parameter is ``cpu`` everywhere; ``cuda`` is added only when ``LOWBIT_REQUIRE_CUDA=1`` (the ``gpu``
nox session), where a machine without CUDA fails instead of skipping."""

from __future__ import annotations

import os

import numpy as np
import pytest
import qhf
import torch
from qhf.corpus import bundled_docs
from qhf.tokenizer import token_blocks
from qlooper.devices import DeviceError

DEVICES = ["cpu", *(["cuda"] if os.environ.get("LOWBIT_REQUIRE_CUDA") == "1" else [])]
CONFIG = {"method": "gptq", "bits": 4, "group_size": 32}
PROBE = torch.tensor([[0, *range(5, 45)]])


def _quantized(src, **options):
    qm = qhf.load(src, CONFIG)
    blocks = token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=48)
    qm.quantize(blocks, **options)
    return qm


@pytest.fixture(scope="module")
def default_run(tiny_dirs, tmp_path_factory):
    qm = _quantized(tiny_dirs("llama"))
    out = tmp_path_factory.mktemp("default") / "q"
    qm.save(out)
    return qm, out


def _logits(model, device="cpu") -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROBE.to(device), use_cache=False).logits.float().cpu()


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_on_a_device_gives_the_default_numbers(tiny_dirs, default_run, device: str) -> None:
    ref, _ = default_run
    qm = _quantized(tiny_dirs("llama"), device=device)
    assert qm.summary is not None and qm.summary.compute is not None
    assert qm.summary.compute["device"].startswith(device) and qm.summary.compute["compute_dtype"] == "float32"
    assert ref.summary is not None and ref.summary.compute == {**qm.summary.compute, "device": "cpu"}
    assert {p.device.type for p in qm.model.parameters()} == {"cpu"}  # the layers came back
    assert qm.results is not None and ref.results is not None
    for name, done in qm.results.items():
        for key, value in done.tensors().items():
            other = ref.results[name].tensors()[key]
            if device == "cpu":
                assert np.array_equal(value, other), (name, key)
    if device != "cpu":
        same = sum(int((d.weight.codes == ref.results[n].weight.codes).sum()) for n, d in qm.results.items())
        assert same / sum(d.weight.codes.size for d in qm.results.values()) > 0.99


def test_bfloat16_forwards_are_recorded_and_close_to_float32(tiny_dirs, default_run, tmp_path) -> None:
    ref, _ = default_run
    qm = _quantized(tiny_dirs("llama"), compute_dtype="bfloat16")
    assert qm.summary is not None and qm.summary.compute is not None
    assert qm.summary.compute["compute_dtype"] == "bfloat16"
    assert qm.run is not None and ref.run is not None
    ratios = np.array([a.loss / b.loss for a, b in zip(qm.run.report, ref.run.report, strict=True)])
    assert np.all(np.abs(ratios - 1) < 0.2), ratios
    assert qm.results is not None and ref.results is not None
    differ = [n for n, d in qm.results.items() if not np.array_equal(d.weight.codes, ref.results[n].weight.codes)]
    assert differ  # the activations were bfloat16: some code changed
    saved = qm.save(tmp_path / "q")
    assert saved.verified
    assert saved.report_dict()["compute"]["compute_dtype"] == "bfloat16"


@pytest.mark.parametrize("device", DEVICES)
def test_load_quantized_on_a_device(default_run, device: str) -> None:
    _, out = default_run
    loaded = qhf.load_quantized(out, device=device)
    on_cpu = qhf.load_quantized(out)
    assert {p.device.type for p in loaded.model.parameters()} == {device}
    got, want = _logits(loaded.model, device), _logits(on_cpu.model)
    if device == "cpu":
        assert torch.equal(got, want) and loaded.backends == on_cpu.backends
    else:  # qkernels' Triton kernels serve a CUDA device
        assert all(name.startswith("triton") for name in loaded.backends.values()), loaded.backends
        assert torch.allclose(got, want, rtol=1e-3, atol=1e-3)
    assert isinstance(loaded.generate_text("def", max_new_tokens=3), str)


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({"device": "cuda:7"}, r"device: 'cuda:7'.*available here: cpu"),
        ({"device": "foo"}, r"device: 'foo' is not a device name \(available here: cpu"),
        ({"cache_device": "cuda:7"}, r"cache_device: 'cuda:7'.*available here: cpu"),
        ({"compute_dtype": "int8"}, r"compute_dtype: expected one of float32, bfloat16, float16, found 'int8'"),
    ],
)
def test_a_device_this_machine_lacks_is_refused_before_any_work(tiny_dirs, options, pattern) -> None:
    qm = qhf.load(tiny_dirs("llama"), CONFIG)
    calls = []
    qm.source.materialize_base = lambda: calls.append(1)  # the first work quantize does after its checks
    with pytest.raises(DeviceError, match=pattern):
        qm.quantize(["some text"], **options)
    assert calls == [] and qm.results is None and qm.run is None


def test_load_quantized_refuses_a_missing_device_before_reading(tmp_path) -> None:
    with pytest.raises(DeviceError, match=r"device: 'cuda:7'.*available here: cpu"):
        qhf.load_quantized(tmp_path / "does-not-exist", device="cuda:7")
