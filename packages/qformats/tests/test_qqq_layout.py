"""QQQ (W4A8) layout: golden words from the reference's pack, round trips, exact transcodes, refusals."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qformats.errors import LayoutError, TranscodeError
from qformats.layouts.qqq import QQQWeight, infer_meta, pack_qqq, unpack_qqq, validate_qqq
from qformats.layouts.qqq.tiles import weight_perm
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight, default_g_idx


def formula_weight(k: int, n: int, group_size: int) -> QQQWeight:
    """Deterministic codes and scales (the inputs the golden digests below were packed from)."""
    o = np.arange(n)[:, None]
    i = np.arange(k)[None, :]
    codes = ((7 * o + 3 * i + i // 16) % 16).astype(np.uint8)
    s_channel = (0.001 * (1 + np.arange(n) % 7)).astype(np.float32)
    if group_size == -1:
        codes[codes == 0] = 1  # the reference's per-channel codes are in [-7, 7]
        return QQQWeight(codes, None, s_channel, -1)
    s_group = (1 + (np.arange(n)[None, :] + np.arange(k // group_size)[:, None]) % 16).astype(np.float16)
    return QQQWeight(codes, s_group, s_channel, group_size)


def digest(tensors: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in ("B", "s_channel", "s_group"):
        h.update(np.ascontiguousarray(tensors[name]).tobytes())
    return h.hexdigest()


def random_qqq(rng: np.random.Generator, k: int, n: int, group_size: int) -> QQQWeight:
    codes = rng.integers(0, 16, (n, k)).astype(np.uint8)
    s_channel = (rng.random(n) * 0.01 + 1e-4).astype(np.float32)
    if group_size == -1:
        return QQQWeight(codes, None, s_channel, -1)
    s_group = (rng.random((k // group_size, n)) * 16).astype(np.float16)
    return QQQWeight(codes, s_group, s_channel, group_size)


# Digests of B, s_channel, s_group as GPT-QModel 7.7.0's QQQLinear.pack wrote them for formula_weight
# (tests-interop/test_qqq_vs_reference.py re-derives them from the reference itself).
GOLDEN = {
    (256, 128, 128): "81dd49a96407b687eacde06ce1f4f42adf44dc0e02ff5a6f8c250d25c5cec097",
    (128, 64, -1): "bde5c511acd51fc4b3ba53ffb51234a7093f363b1297ca1fd22d159c61b7dbb6",
}


@pytest.mark.parametrize(("k", "n", "gs"), list(GOLDEN))
def test_pack_matches_reference_golden(k: int, n: int, gs: int) -> None:
    tensors = pack_qqq(formula_weight(k, n, gs))
    assert digest(tensors) == GOLDEN[(k, n, gs)]
    first = {(256, 128, 128): (0x1B93E860, 0xE860B53D), (128, 64, -1): (0x19E6B390, 0xE6B3905D)}[(k, n, gs)]
    words = tensors["B"].view(np.uint32)
    assert (int(words[0, 0]), int(words[1, 5])) == first


@pytest.mark.parametrize(
    ("gs", "places"),
    [
        (128, [(0, 0), (2, 0), (0, 8), (2, 8), (1, 0), (3, 0), (1, 8), (3, 8)]),
        (-1, [(0, 8), (0, 0), (1, 8), (1, 0), (2, 8), (2, 0), (3, 8), (3, 0)]),
    ],
)
def test_first_word_holds_these_positions(gs: int, places: list[tuple[int, int]]) -> None:
    # Nibble i of word 0 holds the code at (in=k, out=n) = places[i]; per-channel stores code ^ 8.
    k, n = 256, 64
    codes = np.full((n, k), 8, np.uint8)  # signed 0 everywhere: nibble 8 grouped, 0 per-channel
    for value, (row, col) in enumerate(places, start=1):
        codes[col, row] = value if gs == 128 else value ^ 8
    s_group = np.ones((2, n), np.float16) if gs == 128 else None
    w = QQQWeight(codes, s_group, np.ones(n, np.float32), gs)
    words = pack_qqq(w)["B"].view(np.uint32)
    assert int(words[0, 0]) == 0x87654321
    rest = words.ravel()[1:]
    assert set(rest.tolist()) == ({0x88888888} if gs == 128 else {0})


def test_weight_perms_are_permutations() -> None:
    for mode in ("grouped", "channel"):
        assert np.array_equal(np.sort(weight_perm(mode)), np.arange(1024))


@settings(max_examples=25, deadline=None)
@given(
    kt=st.integers(1, 3),
    nt=st.integers(1, 2),
    grouped=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_round_trip_is_identity(kt: int, nt: int, grouped: bool, seed: int) -> None:
    k, n = 128 * kt, 64 * nt
    gs = 64 if grouped else -1
    w = random_qqq(np.random.default_rng(seed), k, n, gs)
    tensors = pack_qqq(w)
    meta = infer_meta(tensors, group_size=gs)
    assert (meta.in_features, meta.out_features) == (k, n)
    assert validate_qqq(tensors, meta) == []
    back = unpack_qqq(tensors, meta)
    assert np.array_equal(back.codes, w.codes)
    assert np.array_equal(back.s_channel, w.s_channel)
    if grouped:
        assert back.s_group is not None and w.s_group is not None
        assert np.array_equal(back.s_group.view(np.uint16), w.s_group.view(np.uint16))
    else:
        assert back.s_group is None
    assert np.array_equal(back.dequantize(), w.dequantize())
    again = pack_qqq(back)
    for name, value in tensors.items():
        assert np.array_equal(again[name].view(np.uint8), value.view(np.uint8)), name


def test_group_size_equal_to_in_features_is_per_channel() -> None:
    w = random_qqq(np.random.default_rng(3), 128, 64, -1)
    tensors = pack_qqq(w)
    back = unpack_qqq(tensors, LayoutMeta(4, 128, 128, 64))
    assert back.group_size == -1 and np.array_equal(back.codes, w.codes)
    whole = QQQWeight(w.codes, np.ones((1, 64), np.float16), w.s_channel, 128)
    with pytest.raises(LayoutError, match="per-channel"):
        pack_qqq(whole)


def test_dequantize_rounds_half_to_even_and_clips_to_int8() -> None:
    codes = np.array([[15, 0, 9, 11, 7, 8, 8, 8] * 2], np.uint8)  # signed 7, -8, 1, 3, -1, 0, 0, 0
    s_group = np.array([[20.0], [0.5]], np.float16)  # group 0 clips to int8; group 1 gives halves
    w = QQQWeight(codes, s_group, np.array([2.0], np.float32), 8)
    dense = w.dequantize()[0]
    assert dense[:5].tolist() == [254.0, -256.0, 40.0, 120.0, -40.0]  # 140 -> 127, -160 -> -128
    assert dense[8:13].tolist() == [8.0, -8.0, 0.0, 4.0, 0.0]  # 3.5 -> 4, 0.5 -> 0, 1.5 -> 2, -0.5 -> 0
    per_channel = QQQWeight(codes, None, np.array([2.0], np.float32), -1)
    assert per_channel.dequantize()[0, :2].tolist() == [7 * 16 * 2.0, -8 * 16 * 2.0]


def test_per_channel_is_exactly_a_quantized_weight_and_transcodes_losslessly() -> None:
    w = random_qqq(np.random.default_rng(5), 128, 64, -1)
    logical = w.to_quantized_weight()
    assert np.array_equal(logical.dequantize(), w.dequantize())
    # QQQ -> GPTQ v2 -> QQQ, bit exact
    gptq = get_layout("gptq_v2")
    meta = LayoutMeta(4, -1, 128, 64)
    again = QQQWeight.from_quantized_weight(gptq.unpack(gptq.pack(logical), meta))
    assert np.array_equal(pack_qqq(again)["B"], pack_qqq(w)["B"])
    assert np.array_equal(again.s_channel, w.s_channel)


def test_grouped_transcode_is_exact_or_refused() -> None:
    rng = np.random.default_rng(9)
    n, k = 64, 128
    codes = rng.integers(0, 16, (n, k)).astype(np.uint8)
    channel = np.full(n, 0.25, np.float32)
    integral = QQQWeight(codes, rng.integers(1, 16, (2, n)).astype(np.float16), channel, 64)
    logical = integral.to_quantized_weight()
    assert np.array_equal(logical.dequantize(), integral.dequantize())
    back = QQQWeight.from_quantized_weight(logical, s_channel=channel)
    assert back.s_group is not None and integral.s_group is not None
    assert np.array_equal(back.s_group, integral.s_group)
    fractional = QQQWeight(codes, np.full((2, n), 1.3, np.float16), channel, 64)
    with pytest.raises(TranscodeError, match="weights differ"):
        fractional.to_quantized_weight()
    with pytest.raises(TranscodeError, match="needs s_channel"):
        QQQWeight.from_quantized_weight(logical)


def test_quantized_weights_qqq_cannot_hold_are_refused_by_name() -> None:
    base = dict(scales=np.ones((1, 64), np.float32), g_idx=default_g_idx(128, -1), group_size=-1, sym=True)
    eight_bit = QuantizedWeight(np.zeros((64, 128), np.uint8), zeros=np.full((1, 64), 128, np.int32), bits=8, **base)
    with pytest.raises(TranscodeError, match="4-bit codes only"):
        QQQWeight.from_quantized_weight(eight_bit)
    asym = QuantizedWeight(np.zeros((64, 128), np.uint8), zeros=np.full((1, 64), 3, np.int32), bits=4, **base)
    with pytest.raises(TranscodeError, match="zero point 8"):
        QQQWeight.from_quantized_weight(asym)


def good_tensors(gs: int = 64) -> tuple[dict[str, np.ndarray], LayoutMeta]:
    return pack_qqq(random_qqq(np.random.default_rng(1), 128, 64, gs)), LayoutMeta(4, gs, 128, 64)


def rules(tensors: dict[str, np.ndarray], meta: LayoutMeta) -> list[str]:
    return [v.rule for v in validate_qqq(tensors, meta)]


def test_malformed_tensors_are_named() -> None:
    tensors, meta = good_tensors()
    assert rules({k: v for k, v in tensors.items() if k != "s_group"}, meta) == ["QQQ-MISSING"]
    assert rules({**tensors, "s_channel": tensors["s_channel"].astype(np.float16)}, meta) == ["QQQ-DTYPE-S_CHANNEL"]
    assert rules({**tensors, "B": tensors["B"][:4]}, meta) == ["QQQ-SHAPE-B"]
    assert rules({**tensors, "s_group": tensors["s_group"][:1]}, meta) == ["QQQ-SHAPE-S_GROUP"]
    bad = tensors["s_group"].copy()
    bad[0, 0] = np.inf
    assert rules({**tensors, "s_group": bad}, meta) == ["QQQ-SCALE-VALUE"]
    assert rules(tensors, LayoutMeta(3, 64, 128, 64)) == ["QQQ-DIMS"]
    assert rules(tensors, LayoutMeta(4, 64, 128, 32)) == ["QQQ-DIMS"]
    assert rules(tensors, LayoutMeta(4, 48, 128, 64)) == ["QQQ-DIMS"]
    per_channel, channel_meta = good_tensors(-1)
    assert rules({**per_channel, "s_group": tensors["s_group"]}, channel_meta) == ["QQQ-SHAPE-S_GROUP"]
    with pytest.raises(LayoutError, match=r"\[QQQ-SHAPE-B\] B: expected shape \(8, 128\)"):
        unpack_qqq({**tensors, "B": tensors["B"][:4]}, meta)
    with pytest.raises(LayoutError, match="'s_channel'"):
        infer_meta({"B": tensors["B"]}, group_size=64)


def test_bad_logical_fields_are_named() -> None:
    codes = np.zeros((64, 128), np.uint8)
    channel = np.ones(64, np.float32)
    with pytest.raises(LayoutError, match="codes: expected 4-bit"):
        QQQWeight(codes + 16, None, channel)
    with pytest.raises(LayoutError, match="s_channel: expected float32"):
        QQQWeight(codes, None, channel.astype(np.float16))
    with pytest.raises(LayoutError, match="s_group: expected float16"):
        QQQWeight(codes, np.ones((2, 64), np.float32), channel, 64)
    with pytest.raises(LayoutError, match="s_group: a per-channel"):
        QQQWeight(codes, np.ones((1, 64), np.float16), channel, -1)


def test_config_reads_and_writes_the_reference_fields() -> None:
    from qformats.config import parse_config

    # GPT-QModel 7.7.0's QQQConfig(bits=4, group_size=128).to_dict() (meta left out)
    reference = {
        "bits": 4, "group_size": 128, "desc_act": False, "lm_head": False, "method": "qqq", "quant_method": "qqq",
        "format": "qqq", "checkpoint_format": "qqq", "pack_dtype": "int32", "sym": True, "wbits": 4,
    }  # fmt: skip
    cfg = parse_config(reference)
    assert (cfg.bits, cfg.group_size, cfg.sym, cfg.layout) == (4, 128, True, "qqq") and not cfg.unknown
    written = cfg.to_dict()
    assert written["wbits"] == 4 and all(written[k] == v for k, v in reference.items())
