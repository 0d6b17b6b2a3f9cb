"""Driving GPT-QModel 7.7.0's QQQ module on CPU: its own ``pack`` writes the tensors, its own torch-path
dequantization (``QQQTorchLinear._dequantize_weight_for_torch``) reads them back.

The reference's QQQ quantizer and CUDA kernel need a GPU; its ``pack`` and torch dequantization do not.
"""

from __future__ import annotations

import numpy as np
import torch


def reference_module(k: int, n: int, group_size: int) -> torch.nn.Module:
    from gptqmodel.nn_modules.qlinear.qqq import QQQTorchLinear

    return QQQTorchLinear(
        bits=4, group_size=group_size, desc_act=False, sym=True, in_features=k, out_features=n, bias=False,
        register_buffers=False,
    )  # fmt: skip


def pack_with_reference(
    weight: torch.Tensor, scales: torch.Tensor, s_extra: torch.Tensor | None, group_size: int
) -> dict[str, np.ndarray]:
    """``QQQLinear.pack`` of a fake-quantized ``weight [N, K]`` with ``scales [N, G]`` and channel ``s_extra [N]``."""
    n, k = weight.shape
    module = reference_module(k, n, group_size)
    linear = torch.nn.Linear(k, n, bias=False)
    linear.weight.data = weight
    module.pack(linear, scales, s_extra)
    return {"B": module.B.numpy(), "s_channel": module.s_channel.numpy(), "s_group": module.s_group.numpy()}


def reference_dense(tensors: dict[str, np.ndarray], k: int, n: int, group_size: int) -> np.ndarray:
    """The reference's dense weight ``[N, K]`` float32: its int8 weight times its channel scale."""
    module = reference_module(k, n, group_size)
    for name, value in tensors.items():
        module.register_buffer(name, torch.from_numpy(np.array(value)))
    int8_weight, s_channel = module._dequantize_weight_for_torch()
    return (int8_weight * s_channel.reshape(1, -1)).T.contiguous().numpy()


def reference_qqq_inputs(
    k: int, n: int, group_size: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """A fake-quantized weight as the reference's QQQ quantizer hands it to ``pack``, with its scales.

    Grouped: int8 channel scale ``s_extra`` and group scales ``s_extra * step`` (integral steps 1..16, as
    the two-level quantizer produces), codes 0..15 around 8. Per-channel: codes -7..7 times one scale.
    """
    g = torch.Generator().manual_seed(seed)
    if group_size in (-1, k):
        scales = torch.rand(n, 1, generator=g) * 0.01 + 1e-3
        return torch.randint(-7, 8, (n, k), generator=g).float() * scales, scales, None
    s_extra = torch.rand(n, generator=g) * 0.01 + 1e-3
    steps = torch.randint(1, 17, (n, k // group_size), generator=g).float()
    scales = steps * s_extra[:, None]
    codes = torch.randint(0, 16, (n, k), generator=g).float() - 8
    return codes * scales.repeat_interleave(group_size, dim=1), scales, s_extra
