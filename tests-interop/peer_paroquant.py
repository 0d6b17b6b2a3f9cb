"""Driving GPT-QModel 7.7.0's ParoQuant module on CPU: ``ParoLinear.pack`` (its AWQ GEMM pack) writes the
AWQ tensors, the transform buffers are set as its ParoQuant processor sets them, and its own code
dequantizes, rotates and runs the layer. The reference's ParoQuant *optimizer* is not driven here."""

from __future__ import annotations

import numpy as np
import torch


def reference_paro_module(k: int, n: int, group_size: int, krot: int, seed: int) -> torch.nn.Module:
    """A packed ``ParoLinear`` with random AWQ codes/zeros/scales and a random (non-identity) transform."""
    from gptqmodel.nn_modules.qlinear.paroquant import ParoLinear

    g = torch.Generator().manual_seed(seed)
    module = ParoLinear(
        bits=4, group_size=group_size, sym=True, desc_act=False, in_features=k, out_features=n, bias=False,
        register_buffers=False, krot=krot,
    )  # fmt: skip
    gs = k if group_size == -1 else group_size
    scales = (torch.rand(n, k // gs, generator=g) * 0.01 + 1e-3).half()
    zeros = torch.randint(0, 16, (n, k // gs), generator=g).float()
    codes = torch.randint(0, 16, (n, k), generator=g).float()
    linear = torch.nn.Linear(k, n, bias=False)
    linear.weight.data = (codes - zeros.repeat_interleave(gs, 1)) * scales.float().repeat_interleave(gs, 1)
    module.pack(linear, scales, zeros)
    pairs = torch.stack([torch.cat([torch.randperm(gs, generator=g) for _ in range(k // gs)]) for _ in range(krot)])
    module.pairs.copy_(pairs.to(torch.int16))
    module.theta.copy_(((torch.rand(krot, k // 2, generator=g) - 0.5) * 2).half())
    module.channel_scales.copy_((torch.rand(1, k, generator=g) + 0.5).half())
    module.post_init()
    return module


def module_tensors(module: torch.nn.Module) -> dict[str, np.ndarray]:
    names = ("qweight", "qzeros", "scales", "pairs", "theta", "channel_scales")
    return {name: buf.numpy().copy() for name, buf in module.named_buffers() if name in names}


def reference_awq_dense(module: torch.nn.Module) -> torch.Tensor:
    """The AWQ part as the reference dequantizes it, ``[N, K]`` in its scale dtype."""
    from gptqmodel.quantization.awq.utils.packing_utils import dequantize_gemm

    return dequantize_gemm(module.qweight, module.qzeros, module.scales, module.bits, module.group_size).T
