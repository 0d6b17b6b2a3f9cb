"""Zero-point convention detection on GPTQ words, whatever the label says."""

from __future__ import annotations

import numpy as np
import pytest
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight, default_g_idx
from qformats.zero_convention import V1, V2, detect_zero_convention
from random_weights import random_weight


def rtn_asym(rng: np.random.Generator, out: int, in_: int, gs: int) -> QuantizedWeight:
    """Asymmetric 4-bit min-max RTN of a normal weight (zeros mostly 6..9, codes centred on them)."""
    w = rng.normal(size=(out, in_)).astype(np.float32)
    g = w.reshape(out, in_ // gs, gs)
    lo, hi = np.minimum(g.min(-1), 0), np.maximum(g.max(-1), 0)
    scale = (hi - lo) / 15
    zero = np.clip(np.rint(-lo / scale), 1, 15)
    codes = np.clip(np.rint(g / scale[..., None] + zero[..., None]), 0, 15).reshape(out, in_)
    return QuantizedWeight(
        codes.astype(np.uint8),
        scale.T.astype(np.float16),
        zero.T.astype(np.int32),
        default_g_idx(in_, gs),
        4,
        gs,
        False,
    )


def meta_of(w: QuantizedWeight) -> LayoutMeta:
    return LayoutMeta(w.bits, w.group_size, w.in_features, w.out_features, w.sym)


@pytest.mark.parametrize("packed_as", ["gptq", "gptq_v2"])
def test_symmetric_words_are_decided_with_certainty(packed_as: str) -> None:
    w = random_weight(np.random.default_rng(0), 64, 128, 4, 32, sym=True)
    tensors = get_layout(packed_as).pack(w)
    report = detect_zero_convention(tensors, meta_of(w), labelled="gptq_v2")
    assert report.convention == (V1 if packed_as == "gptq" else V2)
    assert report.confidence == "certain"
    assert report.label_disagrees is (packed_as == "gptq")


@pytest.mark.parametrize("packed_as", ["gptq", "gptq_v2"])
def test_asymmetric_words_are_judged_from_codes(packed_as: str) -> None:
    w = rtn_asym(np.random.default_rng(1), 128, 512, 64)
    tensors = get_layout(packed_as).pack(w)
    lie = "gptq_v2" if packed_as == "gptq" else "gptq"
    report = detect_zero_convention(tensors, meta_of(w), labelled=lie)
    assert report.convention == (V1 if packed_as == "gptq" else V2)
    assert report.confidence == "high"
    assert report.label_disagrees
    assert "groups" in report.evidence


def test_uniform_random_codes_are_not_claimed_with_high_confidence() -> None:
    # Codes unrelated to their zeros carry no signal: the detector must not be sure.
    w = random_weight(np.random.default_rng(2), 64, 128, 4, 32)
    report = detect_zero_convention(get_layout("gptq_v2").pack(w), meta_of(w), labelled="gptq")
    assert report.confidence == "low"
    assert not report.label_disagrees


def test_unreadable_tensors_are_undecided() -> None:
    w = random_weight(np.random.default_rng(3), 64, 128, 4, 32, sym=True)
    tensors = {k: v for k, v in get_layout("gptq_v2").pack(w).items() if k != "qzeros"}
    report = detect_zero_convention(tensors, meta_of(w))
    assert report.convention == "undecided" and "qzeros" in report.evidence
