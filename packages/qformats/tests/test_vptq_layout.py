"""VPTQ: index bitstreams, group resolution, a golden dense weight from the reference, round trips, refusals."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qformats.errors import ConfigError, LayoutError
from qformats.layouts.vptq import VPTQSpec, VPTQWeight, pack_vptq, spec_from_config, unpack_vptq, validate_vptq
from qformats.layouts.vptq.bitstream import pack_bits, unpack_bits

# The golden case: built by formula, packed and dequantized by GPT-QModel 7.7.0's VPTQLinear (float16
# codebooks); tests-interop/test_vptq_vs_reference.py re-derives both numbers below from the reference.
GOLDEN_CONFIG = {
    "vector_lens": [2, 4], "num_centroids": [4, 8], "num_res_centroids": [-1, 4], "npercent": 10,
    "group_size": 16, "enable_norm": True, "norm_dim": 0, "enable_perm": True,
}  # fmt: skip
GOLDEN_DENSE_SHA256 = "4d107b24ce4f88f70012f10efc3a97f448c8b5aa710083c389f3ba93d301e8cb"
GOLDEN_WORDS = {(0, 0): [-1102783648, 1155227756, 27838], (1, 2): [19894582, 0, 0]}


def golden_weight() -> VPTQWeight:
    """in 24, out 10: 3 outlier channels, 2 groups of 16 (the second padded from 5), residual, norm, perm."""
    spec = spec_from_config(GOLDEN_CONFIG, 24, 10)

    def book(c: int, vl: int, base: float) -> np.ndarray:
        return np.array([[base + 0.25 * e - 0.125 * v for v in range(vl)] for e in range(c)], np.float16)

    def idx(rows: int, cols: int, c: int, mul: int, width: int = 16) -> np.ndarray:
        out = np.zeros((rows, width), np.int32)
        out[:, :cols] = [[(mul * i + 3 * j) % c for j in range(cols)] for i in range(rows)]
        return out

    k = 24
    return VPTQWeight(
        spec,
        centroids=np.stack([book(8, 4, -1.0), book(8, 4, 0.5)]),
        indices=np.stack([idx(3, 16, 8, 5), idx(3, 5, 8, 7)]),
        res_centroids=np.stack([book(4, 4, 0.01), book(4, 4, -0.02)]),
        res_indices=np.stack([idx(3, 16, 4, 1), idx(3, 5, 4, 3)]),
        outlier_centroids=book(4, 2, 2.0),
        outlier_indices=idx(5, 3, 4, 1, width=3),
        weight_scale=np.linspace(0.5, 2.0, k, dtype=np.float32).astype(np.float16),
        weight_bias=np.linspace(-0.1, 0.1, k, dtype=np.float32).astype(np.float16),
        perm=np.array([(7 * i + 5) % k for i in range(k)], np.int32),
    )


def test_golden_dense_weight_and_index_words_match_the_reference() -> None:
    w = golden_weight()
    assert w.spec.groups == (3, 16, 2) and w.spec.packed_words == 3
    dense16 = w.dequantize().astype(np.float16)
    assert hashlib.sha256(dense16.tobytes()).hexdigest() == GOLDEN_DENSE_SHA256
    assert np.array_equal(dense16.astype(np.float32), w.dequantize())  # float16 arithmetic, exact in float32
    words = pack_vptq(w)["indices"]
    assert {key: words[key].tolist() for key in GOLDEN_WORDS} == GOLDEN_WORDS


def test_bitstream_by_hand() -> None:
    assert pack_bits(np.array([[1, 2, 3]]), 3).tolist() == [[1 | 2 << 3 | 3 << 6]]
    # 12-bit values straddle the first word: 0xABC at bits 0-11, 0x123 at 12-23, 0x456 at 24-35
    words = pack_bits(np.array([[0xABC, 0x123, 0x456]]), 12).view(np.uint32)
    assert words.tolist() == [[0x56123ABC, 0x4]]
    assert unpack_bits(words.view(np.int32), 12, 3).tolist() == [[0xABC, 0x123, 0x456]]
    assert pack_bits(np.array([[0xFFFFFFFF, 1]]), 32).view(np.uint32).tolist() == [[0xFFFFFFFF, 1]]


@pytest.mark.parametrize(
    ("fields", "groups"),
    [
        ({}, (0, 100, 1)),
        ({"group_size": 48}, (0, 48, 3)),
        ({"group_num": 3}, (0, 34, 3)),  # no outliers: ceil(100 / 3), last group padded
        ({"group_num": 3, "npercent": 5, "vector_lens": [4, 8], "num_centroids": [16, 256]}, (7, 31, 3)),  # 5 + 95 % 3
        ({"group_size": 40, "npercent": 2, "vector_lens": [2, 8], "num_centroids": [16, 256]}, (2, 40, 3)),
    ],
)
def test_group_resolution(fields: dict[str, object], groups: tuple[int, int, int]) -> None:
    assert spec_from_config({"num_centroids": [-1, 256], **fields}, 100, 32).groups == groups


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"num_res_centroids": [-1, 1]}, "num_res_centroids"),
        ({"npercent": 5}, "npercent > 0 needs"),
        ({"group_size": 8, "group_num": 2}, "at most one"),
        ({"group_num": 200}, "no valid grouping"),
        ({"norm_dim": 2}, "norm_dim"),
        ({"vector_lens": [8]}, r"vector_lens: expected \[outlier, main\]"),
    ],
)
def test_bad_configs_are_named(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        spec_from_config(fields, 100, 32)


def random_vptq(rng: np.random.Generator, spec: VPTQSpec, dtype: type = np.float16) -> VPTQWeight:
    outlier, gs, g = spec.groups
    fields: dict[str, np.ndarray] = {
        "centroids": rng.standard_normal((g, spec.num_centroids, spec.vector_len)).astype(dtype),
        "indices": rng.integers(0, spec.num_centroids, (g, spec.num_indices, gs)).astype(np.int32),
    }
    if spec.has_residual:
        res_shape = (g, spec.num_res_centroids, spec.vector_len)
        fields["res_centroids"] = (rng.standard_normal(res_shape) * 0.1).astype(dtype)
        fields["res_indices"] = rng.integers(0, spec.num_res_centroids, (g, spec.num_indices, gs)).astype(np.int32)
    if spec.has_outliers:
        fields["outlier_centroids"] = rng.standard_normal((spec.outlier_num_centroids, spec.outlier_vector_len)).astype(
            dtype
        )
        fields["outlier_indices"] = rng.integers(0, spec.outlier_num_centroids, (spec.outlier_num_indices, outlier))
        fields["outlier_indices"] = fields["outlier_indices"].astype(np.int32)
    if spec.enable_norm:
        size = spec.in_features if spec.norm_dim == 0 else spec.out_features
        fields["weight_scale"] = (rng.random(size) + 0.5).astype(dtype)
        fields["weight_bias"] = (rng.standard_normal(size) * 0.1).astype(dtype)
    if spec.enable_perm:
        fields["perm"] = rng.permutation(spec.in_features).astype(np.int32)
    return VPTQWeight(spec, compute_dtype=np.dtype(dtype).name, **fields)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    in_features=st.integers(8, 80),
    out_features=st.integers(1, 40),
    vector_len=st.sampled_from([1, 2, 4, 6, 8]),
    centroids=st.sampled_from([2, 5, 16, 300]),
    residual=st.sampled_from([-1, 2, 16]),
    grouping=st.sampled_from([{}, {"group_size": 16}, {"group_num": 3}]),
    outliers=st.booleans(),
    norm_dim=st.sampled_from([None, 0, 1]),
    perm=st.booleans(),
)
def test_round_trip_is_identity(
    seed: int,
    in_features: int,
    out_features: int,
    vector_len: int,
    centroids: int,
    residual: int,
    grouping: dict[str, int],
    outliers: bool,
    norm_dim: int | None,
    perm: bool,
) -> None:
    spec = spec_from_config(
        {
            "vector_lens": [3 if outliers else -1, vector_len],
            "num_centroids": [8 if outliers else -1, centroids],
            "num_res_centroids": [-1, residual],
            "npercent": 10 if outliers else 0,
            "enable_norm": norm_dim is not None,
            "norm_dim": norm_dim or 0,
            "enable_perm": perm,
            **grouping,
        },
        in_features,
        out_features,
    )
    w = random_vptq(np.random.default_rng(seed), spec)
    tensors = pack_vptq(w)
    assert validate_vptq(tensors, spec) == []
    back = unpack_vptq(tensors, spec)
    for name in ("centroids", "indices", "res_centroids", "res_indices", "outlier_indices", "perm"):
        mine, theirs = getattr(back, name), getattr(w, name)
        assert (mine is None and theirs is None) or np.array_equal(mine, theirs), name
    dense = back.dequantize()
    assert dense.shape == (out_features, in_features) and np.array_equal(dense, w.dequantize())
    again = pack_vptq(back)
    assert sorted(again) == sorted(tensors) and all(np.array_equal(again[k], v) for k, v in tensors.items())


def test_bfloat16_arithmetic_rounds_every_step() -> None:
    spec = spec_from_config({"num_centroids": [-1, 4], "num_res_centroids": [-1, 2], "vector_lens": [-1, 1]}, 2, 1)
    centroids = np.array([[[1.0], [0.0], [0.0], [0.0]]], np.float32)
    res = np.array([[[2.0**-9], [0.0]]], np.float32)  # 1 + 2^-9 is not a bfloat16: rounds back to 1
    indices = np.zeros((1, 1, 2), np.int32)
    args = {"res_centroids": res, "res_indices": indices}
    assert VPTQWeight(spec, centroids, indices, compute_dtype="bfloat16", **args).dequantize().tolist() == [[1.0, 1.0]]
    exact = VPTQWeight(spec, centroids, indices, compute_dtype="float32", **args).dequantize()
    assert exact.tolist() == [[1.0 + 2.0**-9] * 2]


def test_malformed_tensors_are_named() -> None:
    w = golden_weight()
    spec, tensors = w.spec, pack_vptq(w)

    def rules(t: dict[str, np.ndarray], s: VPTQSpec = spec) -> list[str]:
        return [v.rule for v in validate_vptq(t, s)]

    assert rules({k: v for k, v in tensors.items() if k != "perm"}) == ["VPTQ-MISSING"]
    assert rules(tensors, replace(spec, enable_perm=False)) == ["VPTQ-UNEXPECTED"]
    assert rules({**tensors, "indices": tensors["indices"][:, :2]}) == ["VPTQ-SHAPE-INDICES"]
    assert rules({**tensors, "centroids.weight": tensors["centroids.weight"].astype(np.int32)}) == [
        "VPTQ-DTYPE-CENTROIDS.WEIGHT"
    ]
    too_big = tensors["outlier_indices"].copy()
    too_big[0, 0, 0] = 4
    assert rules({**tensors, "outlier_indices": too_big}) == ["VPTQ-INDEX-RANGE"]
    no_perm = tensors["perm"].copy()
    no_perm[0] = no_perm[1]
    assert rules({**tensors, "perm": no_perm}) == ["VPTQ-PERM"]
    nan_book = tensors["centroids.weight"].copy()
    nan_book[0, 0] = np.nan
    assert rules({**tensors, "centroids.weight": nan_book}) == ["VPTQ-VALUE"]
    five = spec_from_config({"num_centroids": [-1, 5], "vector_lens": [-1, 2]}, 8, 4)  # 3 index bits, 5 entries
    packed = pack_vptq(random_vptq(np.random.default_rng(0), five))
    packed["indices"][0, 0, 0] |= 7
    assert rules(packed, five) == ["VPTQ-INDEX-RANGE"]
    with pytest.raises(LayoutError, match=r"\[VPTQ-PERM\] perm"):
        unpack_vptq({**tensors, "perm": no_perm}, spec)
    with pytest.raises(LayoutError, match=r"indices: expected shape \(2, 3, 16\)"):
        VPTQWeight(spec, w.centroids, w.indices[:, :, :4])


def test_config_fields_are_carried_settings() -> None:
    from qformats.config import parse_config

    # GPT-QModel 7.7.0's VPTQConfig(group_num=2).to_dict() (meta left out)
    reference = {
        "bits": 2, "group_size": -1, "desc_act": False, "lm_head": False, "method": "vptq", "quant_method": "vptq",
        "format": "vptq", "checkpoint_format": "vptq", "pack_dtype": "int32", "vector_lens": [-1, 8],
        "num_centroids": [-1, 4096], "num_res_centroids": [-1, 16], "npercent": 0.0, "group_num": 2,
        "kmeans_mode": "hessian", "kmeans_iters": 100, "kmeans_tol": 1e-05, "kmeans_seed": 0, "enable_norm": False,
        "norm_dim": 0, "enable_perm": False, "block_size": 128, "percdamp": 0.01,
    }  # fmt: skip
    cfg = parse_config(reference)
    assert not cfg.unknown
    spec = spec_from_config(cfg, 4096, 1024)
    assert (spec.vector_len, spec.num_centroids, spec.num_res_centroids, spec.groups) == (8, 4096, 16, (0, 2048, 2))
    assert spec.packed_words == 2048 * 16 // 32
