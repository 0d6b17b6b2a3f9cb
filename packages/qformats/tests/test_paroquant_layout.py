"""ParoQuant: AWQ GEMM tensors plus the input transform; round trips, the dense equivalent, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qformats.errors import LayoutError, TranscodeError
from qformats.layouts.paroquant import (
    ParoQuantWeight,
    identity_rotation,
    infer_meta,
    pack_paroquant,
    rotate_inputs,
    unpack_paroquant,
    validate_paroquant,
)
from qformats.layouts.registry import LayoutMeta
from random_weights import random_weight


def random_paro(seed: int, k: int = 128, n: int = 64, gs: int = 32, krot: int = 3) -> ParoQuantWeight:
    rng = np.random.default_rng(seed)
    weight = random_weight(rng, n, k, 4, gs, sym=False)
    g = k if gs == -1 else gs
    pairs = np.stack([np.concatenate([rng.permutation(g) for _ in range(k // g)]) for _ in range(krot)])
    theta = ((rng.random((krot, k // 2)) - 0.5) * 2).astype(np.float16)
    scales = (rng.random((1, k)) + 0.5).astype(np.float16)
    return ParoQuantWeight(weight, pairs.astype(np.int16), theta, scales)


def test_identity_rotation_matches_the_reference_buffers() -> None:
    # build_identity_rotation_buffers(in_features=8, group_size=4, krot=2) in GPT-QModel 7.7.0
    pairs, theta, scales = identity_rotation(8, 4, 2)
    assert pairs.dtype == np.int16 and pairs.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3]] * 2
    assert theta.dtype == np.float16 and theta.shape == (2, 4) and not theta.any()
    assert scales.dtype == np.float16 and scales.tolist() == [[1.0] * 8]


# GPT-QModel 7.7.0's apply_paroquant_rotation_reference on these float16 inputs (output bit patterns);
# tests-interop/test_paroquant_vs_reference.py re-derives them from the reference.
ROTATION_CASE = {
    "pairs": [[0, 3, 1, 2, 2, 0, 3, 1], [1, 0, 2, 3, 0, 2, 1, 3]],
    "theta": [[0.5, -1.25, 0.75, 2.0], [-0.3, 1.1, 0.0, -2.5]],
    "scales": [[1.0, 0.5, 2.0, 1.5, 0.75, 1.25, 1.0, 3.0]],
    "x": (np.arange(16, dtype=np.float32).reshape(2, 8) - 7.5).tolist(),
}
ROTATION_GOLDEN = [
    [-14694, 18931, -15092, 17609, -17618, -17802, -15930, 17086],
    [15863, -15058, 17646, -21696, -16424, 19746, 18190, -13894],
]


def rotation_case() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    return (
        np.array(ROTATION_CASE["pairs"], np.int16),
        np.array(ROTATION_CASE["theta"], np.float16),
        np.array(ROTATION_CASE["scales"], np.float16),
        np.array(ROTATION_CASE["x"], np.float16),
    )


def test_float16_rotation_matches_reference_golden() -> None:
    pairs, theta, scales, x = rotation_case()
    assert rotate_inputs(x, pairs, theta, scales, 4).view(np.int16).tolist() == ROTATION_GOLDEN


def test_rotation_by_hand() -> None:
    # One group of 4, one round: pairs (0, 2) at 90 degrees and (3, 1) at 0; channel scales 2.
    weight = random_weight(np.random.default_rng(0), 64, 4, 4, -1, sym=False)
    pairs = np.array([[0, 2, 3, 1]], np.int16)
    theta = np.array([[np.pi / 2, 0.0]], np.float32)
    paro = ParoQuantWeight(weight, pairs, theta, np.full((1, 4), 2.0, np.float32))
    x = np.array([[1.0, 2.0, 3.0, 4.0]])
    rotated = paro.rotate_inputs(x)
    # x*2 = (2, 4, 6, 8); x0' = cos x0 + sin x2 = 6, x2' = -sin x0 + cos x2 = -2
    assert np.allclose(rotated, [[6.0, 4.0, -2.0, 8.0]], atol=1e-12)
    dense = paro.dequantize().astype(np.float64)
    assert np.allclose(x @ dense.T, rotated @ weight.dequantize().astype(np.float64).T, rtol=1e-6)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), gs=st.sampled_from([-1, 32, 64]), krot=st.integers(1, 4))
def test_round_trip_and_dense_equivalent(seed: int, gs: int, krot: int) -> None:
    w = random_paro(seed, gs=gs, krot=krot)
    tensors = pack_paroquant(w)
    meta = infer_meta(tensors, group_size=gs)
    assert validate_paroquant(tensors, meta) == []
    back = unpack_paroquant(tensors, meta)
    for name in ("pairs", "theta", "channel_scales"):
        mine, theirs = getattr(back, name), getattr(w, name)
        assert np.array_equal(mine, theirs) and mine.dtype == theirs.dtype
    assert np.array_equal(back.weight.dequantize(), w.weight.dequantize())
    again = pack_paroquant(back)
    assert all(np.array_equal(again[k].view(np.uint8), v.view(np.uint8)) for k, v in tensors.items())
    x = np.random.default_rng(seed).standard_normal((3, 128))
    via_rotation = w.rotate_inputs(x) @ w.weight.dequantize().astype(np.float64).T
    assert np.allclose(x @ w.dequantize().astype(np.float64).T, via_rotation, rtol=1e-5, atol=1e-5)


def test_identity_transcodes_exactly_and_a_rotation_is_refused() -> None:
    weight = random_weight(np.random.default_rng(4), 64, 128, 4, 32, sym=False)
    plain = ParoQuantWeight.from_quantized_weight(weight, krot=8)
    assert plain.is_identity() and plain.to_quantized_weight() is weight
    assert np.array_equal(plain.dequantize(), weight.dequantize())
    with pytest.raises(TranscodeError, match="rotates and scales"):
        random_paro(1).to_quantized_weight()


def test_symmetric_config_still_reads_learned_zero_points() -> None:
    w = random_paro(2)
    tensors = pack_paroquant(w)
    back = unpack_paroquant(tensors, LayoutMeta(4, 32, 128, 64, sym=True))
    assert np.array_equal(back.weight.zeros, w.weight.zeros)


def rules(tensors: dict[str, np.ndarray], meta: LayoutMeta) -> list[str]:
    return [v.rule for v in validate_paroquant(tensors, meta)]


def test_malformed_tensors_are_named() -> None:
    tensors = pack_paroquant(random_paro(3))
    meta = LayoutMeta(4, 32, 128, 64)
    assert rules({k: v for k, v in tensors.items() if k != "theta"}, meta) == ["PARO-MISSING"]
    assert rules({**tensors, "theta": tensors["theta"][:, :10]}, meta) == ["PARO-SHAPE-THETA"]
    assert rules({**tensors, "pairs": tensors["pairs"].astype(np.float32)}, meta) == ["PARO-DTYPE-PAIRS"]
    assert rules({**tensors, "channel_scales": tensors["channel_scales"][:, :64]}, meta) == [
        "PARO-SHAPE-CHANNEL_SCALES"
    ]
    duplicated = tensors["pairs"].copy()
    duplicated[0, 1] = duplicated[0, 0]
    assert rules({**tensors, "pairs": duplicated}, meta) == ["PARO-PAIRS"]
    out_of_group = tensors["pairs"].copy()
    out_of_group[1, 5] = 32
    assert rules({**tensors, "pairs": out_of_group}, meta) == ["PARO-PAIRS"]
    padded = tensors["pairs"].copy()
    padded[0, :2] = -1  # (-1, -1) padding is allowed
    assert rules({**tensors, "pairs": padded}, meta) == []
    bad_theta = tensors["theta"].copy()
    bad_theta[0, 0] = np.nan
    assert rules({**tensors, "theta": bad_theta}, meta) == ["PARO-THETA-VALUE"]
    zero_scale = tensors["channel_scales"].copy()
    zero_scale[0, 3] = 0
    assert rules({**tensors, "channel_scales": zero_scale}, meta) == ["PARO-SCALE-VALUE"]
    assert rules(tensors, LayoutMeta(3, 32, 128, 64)) == ["PARO-DIMS"]
    assert rules(tensors, LayoutMeta(4, 48, 128, 64)) == ["PARO-DIMS"]
    assert rules({**tensors, "qweight": tensors["qweight"][:64]}, meta) == ["AWQ-GEMM-SHAPE-QWEIGHT"]
    with pytest.raises(LayoutError, match=r"\[PARO-PAIRS\] pairs"):
        unpack_paroquant({**tensors, "pairs": duplicated}, meta)


def test_bad_logical_fields_are_named() -> None:
    w = random_paro(5)
    with pytest.raises(LayoutError, match="theta: expected"):
        ParoQuantWeight(w.weight, w.pairs, w.theta[:, :3], w.channel_scales)
    with pytest.raises(LayoutError, match="pairs: an index appears in two pairs"):
        ParoQuantWeight(w.weight, np.tile(np.array([0, 1], np.int16), (3, 64)), w.theta, w.channel_scales)
    with pytest.raises(LayoutError, match="group_size: ParoQuant rotates groups"):
        identity_rotation(96, 64, 2)


def test_config_carries_krot() -> None:
    from qformats.config import parse_config

    # GPT-QModel 7.7.0's ParoConfig(bits=4, group_size=128).to_dict() (meta left out)
    reference = {
        "bits": 4, "group_size": 128, "desc_act": True, "lm_head": False, "method": "paroquant",
        "quant_method": "paroquant", "format": "paroquant", "checkpoint_format": "paroquant", "pack_dtype": "int32",
        "zero_point": False, "krot": 8,
    }  # fmt: skip
    cfg = parse_config(reference)
    assert cfg.settings["krot"] == 8 and not cfg.unknown and cfg.sym
    assert cfg.to_dict()["krot"] == 8
