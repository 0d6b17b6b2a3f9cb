"""A solved module's result holds the module's weight as its dequantized weight (one tensor, not two), with the
same values; a view of a larger tensor and a processor that changes the weight afterwards (EoRA) keep their own."""

from __future__ import annotations

import numpy as np
import torch
from qalgos.result import QuantResult
from qalgos.rtn import quantize_rtn
from qalgos.spec import QuantSpec
from qlooper import GPTQProcessor, quantize_model
from qlooper.processors.base import install_result
from qlooper.processors.eora import EoRAProcessor
from toy_models import DENSE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)


def _result(weight: torch.Tensor) -> QuantResult:
    return quantize_rtn(weight.detach().clone(), SPEC)


def test_the_result_holds_the_module_weight_itself() -> None:
    linear = torch.nn.Linear(64, 48, bias=False)
    result = _result(linear.weight)
    installed = install_result(linear, result)
    assert installed.dequantized.untyped_storage().data_ptr() == linear.weight.untyped_storage().data_ptr()
    assert torch.equal(installed.dequantized, result.dequantized) and installed.weight is result.weight


def test_a_result_of_another_dtype_or_a_view_keeps_its_own_copy() -> None:
    linear = torch.nn.Linear(64, 48, bias=False).to(torch.bfloat16)
    result = _result(linear.weight.float())  # float32 dequantized into a bfloat16 weight: not exact
    assert install_result(linear, result) is result
    fused = torch.zeros(2, 48, 64)
    expert = torch.nn.Linear(64, 48, bias=False)
    expert.weight = torch.nn.Parameter(fused[1], requires_grad=False)  # a slice of a fused tensor
    result = _result(torch.randn(48, 64))
    assert install_result(expert, result) is result
    assert torch.equal(fused[1], result.dequantized)  # installed all the same


class RecordingGPTQ(GPTQProcessor):
    """GPTQ that records, right after each group's solve, whether each result aliases its module's weight."""

    def __init__(self, spec: QuantSpec) -> None:
        super().__init__(spec)
        self.aliased: dict[str, bool] = {}

    def process(self, ctx, group):
        rows = super().process(ctx, group)
        for mod, row in zip(group.modules, rows, strict=True):
            self.aliased[row.name] = row.result.dequantized.data_ptr() == mod.weight.data_ptr()
        return rows


def test_gptq_results_alias_their_weights_and_give_the_same_checkpoint() -> None:
    model = ToyDecoder()
    processor = RecordingGPTQ(SPEC)
    run = quantize_model(model, DENSE, toy_calibration(), SPEC, processor, format="gptq")
    assert processor.aliased and all(processor.aliased.values())
    modules = dict(model.named_modules())
    for name, finalized in run.modules.items():  # what the loop continued with is each stored weight
        stored = torch.from_numpy(finalized.weight.dequantize().astype(np.float32))
        assert torch.equal(modules[name].weight.detach(), stored), name


def test_eora_results_keep_the_quantized_weight_when_the_adapter_changes_the_module() -> None:
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    class Recording(EoRAProcessor):
        def process(self, ctx, group):
            rows = super().process(ctx, group)
            for mod, row in zip(group.modules, rows, strict=True):
                seen[row.name] = (row.result.dequantized.clone(), mod.weight.detach().clone())
            return rows

    processor = Recording(GPTQProcessor(SPEC), 4)
    run = quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, processor, format="gptq")
    for name, (dequantized, weight) in seen.items():
        stored = torch.from_numpy(run.modules[name].weight.dequantize().astype(np.float32))
        assert torch.equal(dequantized, stored), name  # the solve's values, not Q + B A
        assert torch.allclose(weight, stored + processor.adapters[name].delta(), atol=1e-6), name
