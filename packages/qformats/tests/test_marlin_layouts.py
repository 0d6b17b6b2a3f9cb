"""Marlin tile layouts (``marlin`` GPTQ, ``awq_marlin``): golden word, round trips, refusals."""

from __future__ import annotations

import numpy as np
import pytest
from qformats.errors import LayoutError, UnsupportedLayoutError
from qformats.layouts.marlin._tiles import permute_scales, scale_perms, weight_perm
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight, default_g_idx
from random_weights import random_weight


def meta_of(w: QuantizedWeight) -> LayoutMeta:
    return LayoutMeta(w.bits, w.group_size, w.in_features, w.out_features, w.sym)


def test_weight_perm_is_a_permutation() -> None:
    for bits in (4, 8):
        assert np.array_equal(np.sort(weight_perm(bits)), np.arange(1024))
    grouped, single = scale_perms()
    assert list(grouped[:9]) == [0, 8, 16, 24, 32, 40, 48, 56, 1]
    assert list(single[:10]) == [0, 1, 8, 9, 16, 17, 24, 25, 2, 3]


def test_marlin_first_word_golden() -> None:
    # Word 0 holds q[K, N] at (0,0) (8,0) (0,8) (8,8) (1,0) (9,0) (1,8) (9,8), nibble i at shift 4i.
    k, n = 16, 64
    q = np.zeros((k, n), np.uint8)
    for value, (r, c) in enumerate([(0, 0), (8, 0), (0, 8), (8, 8), (1, 0), (9, 0), (1, 8), (9, 8)], start=1):
        q[r, c] = value
    w = QuantizedWeight(
        np.ascontiguousarray(q.T),
        np.ones((1, n), np.float16),
        np.full((1, n), 8, np.int32),
        default_g_idx(k, -1),
        4,
        -1,
        True,
    )
    t = get_layout("marlin").pack(w)
    assert t["qweight"].shape == (1, 128)
    assert int(t["qweight"].view(np.uint32)[0, 0]) == 0x87654321
    assert not t["qweight"][0, 1:].any()


def test_scale_permutation_golden() -> None:
    s = np.arange(2 * 64, dtype=np.float32).reshape(2, 64)
    grouped = permute_scales(s, 32, 64)
    assert list(grouped[0, :4]) == [0.0, 8.0, 16.0, 24.0]
    single = permute_scales(s[:1], -1, 64)
    assert list(single[0, :4]) == [0.0, 1.0, 8.0, 9.0]


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("gs", [-1, 32, 64, 128])
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_marlin_round_trip(bits: int, gs: int, act_order: bool) -> None:
    w = random_weight(
        np.random.default_rng(bits * 1000 + gs + 1), 128, 256, bits, gs, sym=True, act_order=act_order and gs != -1
    )
    layout = get_layout("marlin")
    t = layout.pack(w)
    assert layout.validate(t, meta_of(w)) == []
    assert layout.unpack(t, meta_of(w)).equals(w)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("gs", [-1, 32, 128])
def test_awq_marlin_round_trip(bits: int, gs: int) -> None:
    w = random_weight(np.random.default_rng(bits * 1000 + gs + 1), 64, 256, bits, gs, sym=False)
    layout = get_layout("awq_marlin")
    t = layout.pack(w)
    assert layout.validate(t, meta_of(w)) == []
    assert layout.unpack(t, meta_of(w)).equals(w)


def test_gptq_marlin_refusals() -> None:
    rng = np.random.default_rng(9)
    layout = get_layout("marlin")
    assert "symmetric only" in (layout.cannot_represent(random_weight(rng, 64, 128, 4, 32)) or "")
    assert "4- or 8-bit" in (layout.cannot_represent(random_weight(rng, 64, 128, 3, 32, sym=True)) or "")
    assert "out_features % 64" in (layout.cannot_represent(random_weight(rng, 48, 128, 4, 32, sym=True)) or "")
    with pytest.raises(UnsupportedLayoutError, match="group_size"):
        layout.pack(random_weight(rng, 64, 96, 4, 48, sym=True))


def test_awq_marlin_refuses_act_order() -> None:
    w = random_weight(np.random.default_rng(10), 64, 128, 4, 32, act_order=True)
    assert "act-order" in (get_layout("awq_marlin").cannot_represent(w) or "")


def test_gptq_marlin_rejects_bad_sort_indices() -> None:
    w = random_weight(np.random.default_rng(11), 64, 128, 4, 32, sym=True)
    t = get_layout("marlin").pack(w)
    broken = {**t, "g_idx_sort_indices": np.zeros(128, np.int32)}
    with pytest.raises(LayoutError, match="MARLIN-PERM"):
        get_layout("marlin").unpack(broken, meta_of(w))


@pytest.mark.parametrize("bits", [4, 8])
def test_fused_tile_transform_equals_the_tile_then_gather_formulation(bits: int) -> None:
    from qformats.layouts.marlin._tiles import tile_codes, tile_weights, untile_codes

    codes = np.random.default_rng(bits).integers(0, 1 << bits, (192, 64), dtype=np.uint8)  # [N, K]
    fused = tile_codes(codes, bits)
    assert np.array_equal(fused, tile_weights(np.ascontiguousarray(codes.T), bits))
    assert np.array_equal(untile_codes(fused, bits, 64, 192), codes)
