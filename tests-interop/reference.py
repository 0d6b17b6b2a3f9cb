"""Driving the reference implementation (GPT-QModel 7.7.0, CPU) from the tests.

Every function here calls GPT-QModel's public API (``GPTQModel.load``, ``quantize``, ``save``) or, for the
dequantized weights, the reference's own kernel code (TorchLinear's dequantization, the AWQ GEMM
dequantizer), so a comparison shows what the reference itself computes from a checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from tiny_llama import PROBE, corpus

BACKENDS = {"gptq": "gptq_torch", "gptq_v2": "gptq_torch", "gptq_p": "gptq_torch", "gemm": "awq_torch"}


def quantize_with_reference(source: Path, out: Path, *, fmt: str, bits: int, sym: bool, group_size: int = 32) -> Path:
    """GPT-QModel quantizes ``source`` (GPTQ, or AWQ for ``gemm``) and saves to ``out``."""
    from gptqmodel import GPTQModel, QuantizeConfig
    from transformers import AutoTokenizer

    method = "awq" if fmt == "gemm" else "gptq"
    config = QuantizeConfig(bits=bits, group_size=group_size, format=fmt, method=method, sym=sym)
    model = GPTQModel.load(str(source), config, device="cpu")
    model.quantize(corpus(8), tokenizer=AutoTokenizer.from_pretrained(source), batch_size=1)
    model.save(str(out))
    return out


def load_with_reference(path: Path, fmt: str) -> Any:
    """GPT-QModel's loader with its portable torch kernel for ``fmt`` (float16 activations)."""
    from gptqmodel import GPTQModel

    return GPTQModel.load(str(path), backend=BACKENDS[fmt], device="cpu", dtype=torch.float16)


def quantized_modules(model: Any) -> dict[str, Any]:
    """Module name -> GPT-QModel quantized linear."""
    return {name: m for name, m in model.model.named_modules() if hasattr(m, "qweight")}


def reference_dense(module: Any) -> torch.Tensor:
    """The reference's dequantized weight of one module, ``[out, in]`` in the module's scale dtype."""
    if hasattr(module, "_dequantize_weight_for_inference"):  # AWQ torch kernel
        from gptqmodel.quantization.awq.utils.packing_utils import dequantize_gemm

        w = dequantize_gemm(module.qweight, module.qzeros, module.scales, module.bits, module.group_size)
    else:  # TorchLinear; the class attribute, in case torch.compile wrapped the instance's
        w = type(module).dequantize_weight(module)
    return w.T.contiguous()


def reference_logits(model: Any) -> torch.Tensor:
    with torch.no_grad():
        return model.model(input_ids=PROBE, use_cache=False).logits.float()
