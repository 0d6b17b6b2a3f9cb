"""VPTQ: the reference's own module tensors read by lowbit, dequantized identically (float16, bfloat16 and
float32 codebooks; residual, outlier, norm and permutation variants), rewritten byte for byte."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from peer_vptq import module_tensors, reference_dense, reference_vptq_module
from qformats.layouts.vptq import pack_vptq, spec_from_config, unpack_vptq, validate_vptq

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages/qformats/tests"))
from test_vptq_layout import GOLDEN_CONFIG, GOLDEN_DENSE_SHA256, GOLDEN_WORDS, golden_weight

CONFIGS: list[dict[str, Any]] = [
    {"vector_lens": [-1, 8], "num_centroids": [-1, 256], "num_res_centroids": [-1, -1]},
    {"vector_lens": [-1, 4], "num_centroids": [-1, 64], "num_res_centroids": [-1, 16], "group_size": 48},
    {
        "vector_lens": [4, 8], "num_centroids": [32, 128], "num_res_centroids": [-1, 8], "npercent": 5,
        "group_num": 3, "enable_norm": True, "norm_dim": 0, "enable_perm": True,
    },
    {
        "vector_lens": [2, 6], "num_centroids": [16, 100], "num_res_centroids": [-1, -1], "npercent": 2,
        "group_size": 40, "enable_norm": True, "norm_dim": 1,
    },
    {"vector_lens": [-1, 8], "num_centroids": [-1, 4096], "num_res_centroids": [-1, 16], "group_num": 2},
]  # fmt: skip
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", range(len(CONFIGS)))
def test_lowbit_reads_reference_vptq_module(case: int, dtype: str) -> None:
    k, n = 130, 70
    config = CONFIGS[case]
    module = reference_vptq_module(k, n, config, DTYPES[dtype], seed=case)
    spec = spec_from_config(config, k, n)
    assert spec.groups == (module.outlier_size, module.group_size, module.group_num)
    tensors = module_tensors(module)
    assert validate_vptq(tensors, spec) == []
    ours = unpack_vptq(tensors, spec, compute_dtype=dtype)
    assert np.array_equal(ours.dequantize(), reference_dense(module))
    again = pack_vptq(ours)
    assert sorted(again) == sorted(tensors)
    for name, value in tensors.items():
        assert again[name].dtype == value.dtype and np.array_equal(again[name], value), name


def test_golden_case_comes_from_the_reference() -> None:
    from gptqmodel.nn_modules.qlinear.vptq_torch import VPTQLinear
    from gptqmodel.quantization.vptq import VPTQQuantResult

    w = golden_weight()
    module = VPTQLinear(bits=2, in_features=24, out_features=10, bias=False, dtype=torch.float16, **GOLDEN_CONFIG)
    result = VPTQQuantResult()
    outlier, gs, _ = w.spec.groups
    widths = [gs, 24 - outlier - gs]
    for c in (1, 2):
        result.centroids[c] = torch.from_numpy(w.centroids[c - 1].astype(np.float32))
        result.indices[c] = torch.from_numpy(w.indices[c - 1][:, : widths[c - 1]].astype(np.int64))
        assert w.res_centroids is not None and w.res_indices is not None
        result.res_centroids[c] = torch.from_numpy(w.res_centroids[c - 1].astype(np.float32))
        result.res_indices[c] = torch.from_numpy(w.res_indices[c - 1][:, : widths[c - 1]].astype(np.int64))
    assert w.outlier_centroids is not None and w.outlier_indices is not None and w.perm is not None
    result.centroids[0] = torch.from_numpy(w.outlier_centroids.astype(np.float32))
    result.indices[0] = torch.from_numpy(w.outlier_indices.astype(np.int64))
    assert w.weight_scale is not None and w.weight_bias is not None
    result.weight_scale = torch.from_numpy(w.weight_scale.astype(np.float32))
    result.weight_bias = torch.from_numpy(w.weight_bias.astype(np.float32))
    result.perm = torch.from_numpy(w.perm.astype(np.int64))
    module.pack(None, vptq_result=result)
    dense = type(module).dequantize(module)
    assert hashlib.sha256(dense.numpy().tobytes()).hexdigest() == GOLDEN_DENSE_SHA256
    assert {key: module.indices[key].tolist() for key in GOLDEN_WORDS} == GOLDEN_WORDS
