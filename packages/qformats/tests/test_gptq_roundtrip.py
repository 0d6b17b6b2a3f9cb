"""logical -> pack -> unpack -> logical is the identity for every bits x layout x pack dtype."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qformats.errors import LayoutError, UnsupportedLayoutError
from qformats.layouts.registry import LayoutMeta, get_layout
from qformats.logical import QuantizedWeight, default_g_idx, group_count

CASES = [("gptq", bits, dt) for bits in (2, 4, 8) for dt in ("int8", "int16", "int32", "int64")] + [
    ("gptq", 3, "int32")
]
CASES += [("gptq_v2", b, dt) for (_, b, dt) in CASES]
CASES += [("gptq_p", bits, "int32") for bits in range(2, 9)]


def make_weight(
    rng: np.random.Generator, out: int, in_: int, bits: int, group_size: int, *, act_order: bool, key: str
) -> QuantizedWeight:
    groups = group_count(in_, group_size)
    lo = 1 if key == "gptq" else 0
    hi = (1 << bits) + lo  # exclusive
    g_idx = default_g_idx(in_, group_size)
    if act_order:
        g_idx = rng.permutation(g_idx).astype(np.int32)
    return QuantizedWeight(
        codes=rng.integers(0, 1 << bits, (out, in_), dtype=np.uint8),
        scales=rng.random((groups, out), dtype=np.float32).astype(np.float16),
        zeros=rng.integers(lo, hi, (groups, out)).astype(np.int32),
        g_idx=g_idx,
        bits=bits,
        group_size=group_size,
        sym=False,
    )


@settings(max_examples=6, deadline=None)
@given(data=st.data())
@pytest.mark.parametrize(("key", "bits", "pack_dtype"), CASES)
def test_round_trip_identity(key: str, bits: int, pack_dtype: str, data: st.DataObject) -> None:
    aligned = key == "gptq_p" or bits == 3
    if aligned:
        out = 32 * data.draw(st.integers(1, 3), label="out/32")
        in_ = 32 * data.draw(st.integers(1, 4), label="in/32")
    else:
        out = data.draw(st.integers(1, 70), label="out")
        in_ = data.draw(st.integers(1, 150), label="in")
    group_size = data.draw(st.sampled_from([-1, 16, 32, 48, 128]), label="group_size")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    weight = make_weight(rng, out, in_, bits, group_size, act_order=data.draw(st.booleans()), key=key)
    snapshot = {name: getattr(weight, name).copy() for name in ("codes", "scales", "zeros", "g_idx")}
    layout = get_layout(key)
    tensors = layout.pack(weight, pack_dtype=pack_dtype)
    assert tensors["qweight"].dtype == np.dtype(pack_dtype)
    meta = LayoutMeta(bits, group_size, in_, out, sym=False, pack_dtype=pack_dtype)
    assert layout.validate(tensors, meta) == []
    frozen = {k: v.copy() for k, v in tensors.items()}
    back = layout.unpack(tensors, meta)
    assert back.equals(weight)
    np.testing.assert_array_equal(back.dequantize(), weight.dequantize())
    for name, arr in snapshot.items():  # inputs never mutated
        np.testing.assert_array_equal(getattr(weight, name), arr)
    for name, arr in frozen.items():
        np.testing.assert_array_equal(tensors[name], arr)


def test_unpacked_weight_does_not_alias_tensors() -> None:
    rng = np.random.default_rng(1)
    weight = make_weight(rng, 8, 32, 8, 32, act_order=False, key="gptq_v2")
    tensors = get_layout("gptq_v2").pack(weight, pack_dtype="int8")
    back = get_layout("gptq_v2").unpack(tensors, LayoutMeta(8, 32, 32, 8, False, "int8"))
    back.codes[...] = 0
    back.scales[...] = 0
    assert get_layout("gptq_v2").unpack(tensors, LayoutMeta(8, 32, 32, 8, False, "int8")).equals(weight)


@pytest.mark.parametrize(("key", "bits"), [("gptq", 3), ("gptq_v2", 3), ("gptq_p", 4), ("gptq_p", 5)])
def test_misaligned_dims_are_refused(key: str, bits: int) -> None:
    weight = make_weight(np.random.default_rng(2), 32, 40, bits, 8, act_order=False, key="gptq_v2")
    reason = get_layout(key).cannot_represent(weight)
    assert reason is not None and "in_features a multiple of 32, found 40" in reason
    with pytest.raises(UnsupportedLayoutError, match="multiple of 32"):
        get_layout(key).pack(weight)


@pytest.mark.parametrize(("key", "bits", "dtype"), [("gptq", 3, "int16"), ("gptq_p", 4, "int64"), ("gptq", 4, "u8")])
def test_disallowed_pack_dtype(key: str, bits: int, dtype: str) -> None:
    weight = make_weight(np.random.default_rng(3), 32, 64, bits, 32, act_order=False, key=key)
    with pytest.raises(LayoutError, match=f"pack_dtype.*{dtype}"):
        get_layout(key).pack(weight, pack_dtype=dtype)


@pytest.mark.parametrize("key", ["gptq", "gptq_v2"])
@pytest.mark.parametrize("bits", [5, 6, 7])
def test_continuous_layouts_refuse_567(key: str, bits: int) -> None:
    weight = make_weight(np.random.default_rng(4), 32, 64, bits, 32, act_order=False, key="gptq_v2")
    assert "the weight is" in (get_layout(key).cannot_represent(weight) or "")
    assert get_layout("gptq_p").cannot_represent(weight) is None
