"""Malformed GPTQ tensors: every violation named with its stable rule id, tensor and expected vs found."""

from __future__ import annotations

import numpy as np
import pytest
from qformats.errors import LayoutError
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight, default_g_idx

META = LayoutMeta(bits=4, group_size=32, in_features=64, out_features=16, sym=True)


def good() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    weight = QuantizedWeight(rng.integers(0, 16, (16, 64), dtype=np.uint8), np.ones((2, 16), np.float16),
                             np.full((2, 16), 8, np.int32), default_g_idx(64, 32), 4, 32, True)  # fmt: skip
    return get_layout("gptq_v2").pack(weight)


def rules(tensors: dict[str, np.ndarray], meta: LayoutMeta = META, key: str = "gptq_v2") -> list[tuple[str, str]]:
    return [(v.rule, v.tensor) for v in get_layout(key).validate(tensors, meta)]


def test_good_tensors_have_no_violation() -> None:
    assert rules(good()) == []


def test_missing_and_wrong_dtype_and_shape_are_all_reported() -> None:
    t = good()
    del t["qzeros"]
    t["qweight"] = t["qweight"][:-1].astype(np.int64)
    t["scales"] = t["scales"].astype(np.int32)
    found = get_layout("gptq_v2").validate(t, META)
    assert ("GPTQ-MISSING", "qzeros") in [(v.rule, v.tensor) for v in found]
    assert ("GPTQ-DTYPE", "qweight") in [(v.rule, v.tensor) for v in found]
    assert ("GPTQ-SHAPE", "qweight") in [(v.rule, v.tensor) for v in found]
    assert ("GPTQ-DTYPE", "scales") in [(v.rule, v.tensor) for v in found]
    shape = next(v for v in found if v.rule == "GPTQ-SHAPE")
    assert shape.expected == "shape [8, 16]" and shape.found == "shape [7, 16]"
    assert "[GPTQ-SHAPE] qweight: expected shape [8, 16], found shape [7, 16]" in [str(v) for v in found]


def test_group_count_and_g_idx_range() -> None:
    t = good()
    t["scales"] = np.ones((3, 16), np.float16)
    t["g_idx"] = np.full(64, 2, np.int32)
    assert rules(t) == [("GPTQ-GROUPS", "scales"), ("GPTQ-GIDX-RANGE", "g_idx")]
    t = good()
    t["g_idx"] = np.arange(63, dtype=np.int32)
    assert rules(t) == [("GPTQ-SHAPE", "g_idx")]
    t["g_idx"] = np.zeros(64, np.float32)
    assert rules(t) == [("GPTQ-DTYPE", "g_idx")]


def test_alignment_bits_and_pack_dtype_rules() -> None:
    found = rules(good(), LayoutMeta(3, 32, 48, 16, True), "gptq")
    assert found[:2] == [("GPTQ-ALIGN", "qweight"), ("GPTQ-ALIGN", "qzeros")]
    assert rules(good(), LayoutMeta(5, 32, 64, 16, True), "gptq") == [("GPTQ-BITS", "<config>")]
    assert rules(good(), LayoutMeta(4, 32, 64, 16, True, "int16"), "gptq_p") == [
        ("GPTQ-PACK-DTYPE", "<config>"),
        ("GPTQ-ALIGN", "qzeros"),
    ]
    assert rules(good(), LayoutMeta(4, 0, 64, 16, True), "gptq") == [("GPTQ-GROUP-SIZE", "<config>")]


def test_unpack_refuses_malformed_tensors_with_every_reason() -> None:
    t = good()
    t["g_idx"] = np.full(64, 9, np.int32)
    t["scales"] = t["scales"][:, :8]
    with pytest.raises(LayoutError, match=r"GPTQ-SHAPE\] scales.*GPTQ-GIDX-RANGE\] g_idx"):
        get_layout("gptq_v2").unpack(t, META)


def test_infer_meta_reads_dims() -> None:
    meta = get_layout("gptq_v2").infer_meta(good(), bits=4, group_size=32)
    assert (meta.in_features, meta.out_features) == (64, 16)
    t = good()
    del t["g_idx"]
    assert get_layout("gptq").infer_meta(t, bits=4, group_size=32).in_features == 64
    with pytest.raises(LayoutError, match="scales"):
        get_layout("gptq").infer_meta({}, bits=4, group_size=32)
