"""Driving GPT-QModel 7.7.0's VPTQ module on CPU: ``VPTQLinear.pack`` loads a ``VPTQQuantResult`` (random
codebooks and indices shaped as its quantizer produces them), its state dict is the checkpoint's module
tensors, and its own ``dequantize`` is the reference dense weight. The VPTQ quantizer itself is not run."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def reference_vptq_module(k: int, n: int, config: dict[str, Any], dtype: torch.dtype, seed: int) -> torch.nn.Module:
    from gptqmodel.nn_modules.qlinear.vptq_torch import VPTQLinear
    from gptqmodel.quantization.vptq import VPTQQuantResult

    g = torch.Generator().manual_seed(seed)
    module = VPTQLinear(bits=2, in_features=k, out_features=n, bias=False, dtype=dtype, **config)
    result = VPTQQuantResult()
    outlier, gs, groups = module.outlier_size, module.group_size, module.group_num
    rows, vl = module.num_indices, module.vector_len
    for c in range(1, groups + 1):
        width = min(gs, k - outlier - (c - 1) * gs)  # the quantizer's last group may be narrower
        result.centroids[c] = torch.randn(module.num_centroids, vl, generator=g)
        result.indices[c] = torch.randint(0, module.num_centroids, (rows, width), generator=g)
        if module.enable_residual:
            result.res_centroids[c] = torch.randn(module.num_res_centroids, vl, generator=g) * 0.1
            result.res_indices[c] = torch.randint(0, module.num_res_centroids, (rows, width), generator=g)
    if module.enable_outlier:
        shape = (module.outlier_num_centroids, module.outlier_vector_len)
        result.centroids[0] = torch.randn(*shape, generator=g)
        result.indices[0] = torch.randint(0, shape[0], (module.outlier_num_indices, outlier), generator=g)
    if module.enable_norm:
        size = k if module.norm_dim == 0 else n
        result.weight_scale = torch.rand(size, generator=g) + 0.5
        result.weight_bias = torch.randn(size, generator=g) * 0.1
    if module.enable_perm:
        result.perm = torch.randperm(k, generator=g)
    module.pack(None, vptq_result=result)
    return module


def module_tensors(module: torch.nn.Module) -> dict[str, np.ndarray]:
    """The saved tensors as lowbit's safetensors reader gives them (bfloat16 as exact float32)."""
    return {
        name: (t.float() if t.dtype == torch.bfloat16 else t).numpy().copy() for name, t in module.state_dict().items()
    }


def reference_dense(module: torch.nn.Module) -> np.ndarray:
    """The reference's dense weight ``[N, K]`` in float32 (the class attribute: no torch.compile wrapper)."""
    return type(module).dequantize(module).float().numpy()
