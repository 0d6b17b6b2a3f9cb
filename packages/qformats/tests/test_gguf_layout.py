"""The registered ``gguf`` layout (type-0 subtypes through QuantizedWeight) and GGUFWeight."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf import quants
from qformats.errors import LayoutError, UnsupportedLayoutError
from qformats.layouts.gguf import GGUFWeight
from qformats.layouts.registry import LayoutMeta, get_layout, registered_layouts
from qformats.logical import QuantizedWeight, default_g_idx

SUBTYPES = {4: "Q4_0", 5: "Q5_0", 8: "Q8_0"}


def _weight(bits: int, out: int = 5, in_: int = 70, seed: int = 0) -> QuantizedWeight:
    rng = np.random.default_rng(seed)
    groups = -(-in_ // 32)
    codes = rng.integers(0, 1 << bits, (out, in_)).astype(np.uint8)
    scales = rng.uniform(0.01, 2, (groups, out)).astype(np.float16)
    zeros = np.full((groups, out), 1 << (bits - 1), dtype=np.int32)
    return QuantizedWeight(codes, scales, zeros, default_g_idx(in_, 32), bits, 32, True)


def test_registered_under_gguf() -> None:
    assert "gguf" in registered_layouts()
    assert get_layout("gguf").key == "gguf"


@pytest.mark.parametrize("bits", [4, 5, 8])
def test_pack_unpack_identity_and_reference_dequant(bits: int) -> None:
    layout = get_layout("gguf")
    weight = _weight(bits)
    tensors = layout.pack(weight)
    meta = LayoutMeta(bits=bits, group_size=32, in_features=70, out_features=5)
    assert layout.validate(tensors, meta) == []
    assert layout.unpack(tensors, meta).equals(weight)
    # the bytes are real ggml blocks: the reference decoder gives the logical dequantization
    dense = quants.dequantize(tensors["qweight"], getattr(Q, SUBTYPES[bits]))[:, :70]
    assert np.array_equal(dense, weight.dequantize())


def test_pack_does_not_mutate_input() -> None:
    weight = _weight(4)
    before = weight.codes.copy(), weight.scales.copy()
    get_layout("gguf").pack(weight)
    assert np.array_equal(weight.codes, before[0]) and np.array_equal(weight.scales, before[1])


def test_cannot_represent_gives_exact_reasons() -> None:
    layout = get_layout("gguf")
    w = _weight(4)
    assert layout.cannot_represent(w) is None
    three = QuantizedWeight(w.codes & 7, w.scales, np.full_like(w.zeros, 4), w.g_idx, 3, 32, True)
    assert "bits=3" in str(layout.cannot_represent(three))
    f32 = QuantizedWeight(w.codes, w.scales.astype(np.float32), w.zeros, w.g_idx, 4, 32, True)
    assert "fp16" in str(layout.cannot_represent(f32))
    asym = QuantizedWeight(w.codes, w.scales, w.zeros + 1, w.g_idx, 4, 32, True)
    assert "fixed zero point of 8" in str(layout.cannot_represent(asym))
    with pytest.raises(UnsupportedLayoutError, match="fixed zero point"):
        layout.pack(asym)


def test_validate_names_the_tensor() -> None:
    layout = get_layout("gguf")
    meta = LayoutMeta(bits=4, group_size=32, in_features=64, out_features=3)
    bad = layout.validate({"qweight": np.zeros((3, 35), np.uint8)}, meta)
    assert [v.rule for v in bad] == ["GGUF-SHAPE"] and "qweight" in str(bad[0])
    assert layout.validate({}, meta)[0].rule == "GGUF-MISSING"
    with pytest.raises(LayoutError, match="GGUF-SHAPE"):
        layout.unpack({"qweight": np.zeros((3, 35), np.uint8)}, meta)
    k_meta = LayoutMeta(bits=6, group_size=256, in_features=256, out_features=1)
    assert layout.validate({"qweight": np.zeros((1, 210), np.uint8)}, k_meta)[0].rule == "GGUF-META"


@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K", "Q1_0", "Q4_1"])
def test_gguf_weight_quantize_and_dequantize(qtype: str) -> None:
    dense = np.random.default_rng(1).standard_normal((4, 300)).astype(np.float32)
    w = GGUFWeight.quantize(dense, qtype)
    assert w.out_features == 4 and w.in_features == 300
    assert w.qweight.shape == (4, w.type.row_bytes(w.type.padded(300)))
    assert w.dequantize().shape == (4, 300)
    with pytest.raises(LayoutError, match="bytes per row"):
        GGUFWeight(w.qweight[:, :-1].copy(), qtype, 300)


def test_config_aliases_resolve_to_stored_types() -> None:
    from qformats.errors import ConfigError
    from qformats.layouts.gguf import alias_for, tensor_type

    assert tensor_type("q4_k_m").name == "Q4_K" and tensor_type(4, "q_k_s").name == "Q4_K"
    assert tensor_type(5).name == "Q5_K" and alias_for(5) == "q5_k_m" and tensor_type(8, "gguf").name == "Q8_0"
    assert tensor_type("q1_0_g128").type_id == 41 and tensor_type(1).name == "Q1_0" and tensor_type(2).name == "Q2_0"
    with pytest.raises(ConfigError, match="no default subtype for 3-bit"):
        tensor_type(3)
    with pytest.raises(ConfigError, match="'q3_k'"):
        tensor_type(3, "q_k")
    with pytest.raises(ConfigError, match="not a GGUF alias"):
        tensor_type("q7_0")


def test_any_subtype_module_validates_and_unpacks() -> None:
    from qformats.layouts.gguf import unpack_gguf, validate_gguf

    dense = np.random.default_rng(4).standard_normal((3, 512)).astype(np.float32)
    w = GGUFWeight.quantize(dense, "Q5_K")
    tensors = {"qweight": w.qweight, "bias": np.zeros(3, np.float16)}
    assert validate_gguf(tensors, "Q5_K", 512, 3) == []
    assert np.array_equal(unpack_gguf(tensors, "q5_k", 512).dequantize(), w.dequantize())
    assert [v.rule for v in validate_gguf(tensors, "Q6_K", 512, 3)] == ["GGUF-SHAPE"]
    assert [v.rule for v in validate_gguf({**tensors, "bias": np.zeros(4)}, "Q5_K", 512, 3)] == ["GGUF-BIAS"]
    with pytest.raises(LayoutError, match="GGUF-SHAPE"):
        unpack_gguf(tensors, "Q4_0", 512)
