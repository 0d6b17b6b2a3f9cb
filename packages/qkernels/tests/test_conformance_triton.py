"""The Triton GPTQ/AWQ backends on an emulated cuda target (Triton interpreter on the CPU)."""

import pytest
import torch
from qkernels.testing.cases import LayerCase
from qkernels.testing.conformance import BackendConformance

pytest.importorskip("triton", reason="the triton extra is installed by the qkernels nox session")

# The interpreter is slow: a narrower spread that still covers act-order, partial groups, asymmetric
# zeros, per-channel groups, bias, odd widths, and a few refusals (wrong family, 3-bit).
TRITON_CASES = (
    LayerCase("gptq_v2", 4, 32, False, 64, 128, bias=True),
    LayerCase("gptq_v2", 4, 32, False, 40, 96, act_order=True),
    LayerCase("gptq", 4, 64, True, 32, 80, bias=True),
    LayerCase("gptq_v2", 4, -1, False, 32, 64),
    LayerCase("gptq_p", 4, 32, True, 32, 64, act_order=True),
    LayerCase("gptq_v2", 3, 32, True, 32, 64),
    LayerCase("gemm", 4, 32, False, 64, 128, bias=True),
    LayerCase("gemm", 4, 64, True, 24, 128),
    LayerCase("gemm", 4, -1, False, 32, 64),
)


class TestTritonGptq(BackendConformance):
    backend = "triton_gptq"
    device = "cuda"
    emulate = True
    cases = TRITON_CASES
    dtypes = (torch.float32, torch.bfloat16, torch.float16)


class TestTritonAwq(BackendConformance):
    backend = "triton_awq"
    device = "cuda"
    emulate = True
    cases = TRITON_CASES
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
