"""Replacing finished modules with qkernels quantized linears through ``kernel_replacer``."""

import numpy as np
import torch
from qalgos.spec import QuantSpec
from qkernels import QuantLinear
from qlooper import LoopOptions, quantize_model
from qlooper.kernels import kernel_replacer
from toy_models import DENSE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)


def test_gptq_modules_become_qkernels_modules_with_the_same_function() -> None:
    cal = toy_calibration()
    dense = ToyDecoder()
    quantize_model(dense, DENSE, cal, SPEC, "gptq")
    model = ToyDecoder()
    # the torch reference backend: AUTO may build a C++ extension first, too slow for a unit test
    options = LoopOptions(replace_module=kernel_replacer(backend="torch"))
    run = quantize_model(model, DENSE, cal, SPEC, "gptq", options=options)
    modules = dict(model.named_modules())
    for name, done in run.modules.items():
        module = modules[name]
        assert isinstance(module, QuantLinear), name
        stored = module.checkpoint_tensors()
        assert all(np.array_equal(np.asarray(stored[k]), v) for k, v in done.tensors().items()), name
    b = cal.batches[0]
    with torch.no_grad():
        got, want = model(b.input_ids, b.attention_mask), dense(b.input_ids, b.attention_mask)
    assert torch.allclose(got, want, atol=1e-4)


def test_weight_only_and_wrapped_modules_come_from_the_one_replacer() -> None:
    from qalgos.weight_only import WeightOnlySpec

    seen: list[str] = []

    def options(name: str, done: object) -> dict[str, object]:
        seen.append(name)
        return {"qtype": "Q4_0"}

    class Wrapped(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

    dense = ToyDecoder()
    spec = WeightOnlySpec("gguf", gguf_type="Q4_0")
    quantize_model(dense, DENSE, None, spec, "gguf")
    model = ToyDecoder()
    replace = kernel_replacer(backend="torch", family_options=options, wrap=lambda name, m: Wrapped(m))
    run = quantize_model(model, DENSE, None, spec, "gguf", options=LoopOptions(replace_module=replace))
    modules = dict(model.named_modules())
    assert sorted(seen) == sorted(run.modules)
    for name, done in run.modules.items():
        wrapped = modules[name]
        assert isinstance(wrapped, Wrapped) and isinstance(wrapped.inner, QuantLinear), name
        assert wrapped.inner.contract.logical_kind == "gguf_blocks" and wrapped.inner.contract.method == "gguf"
        assert torch.equal(wrapped.inner.dense_weight(), torch.from_numpy(done.weight.dequantize()))
    b = toy_calibration().batches[0]
    with torch.no_grad():
        got, want = model(b.input_ids, b.attention_mask), dense(b.input_ids, b.attention_mask)
    assert torch.allclose(got, want, atol=1e-5)
