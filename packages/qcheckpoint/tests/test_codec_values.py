"""Continuation codec: value trees and numpy arrays round-trip exactly; unsupported values are rejected by path."""

from __future__ import annotations

import collections
import json
import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from qcheckpoint import ContinuationCodec, ContinuationError, decode_continuation, encode_continuation

scalars = st.none() | st.booleans() | st.integers() | st.text() | st.floats(allow_nan=False, allow_infinity=False)
keys = st.text(max_size=8) | st.integers() | st.booleans()
arrays = hnp.arrays(
    dtype=st.sampled_from(["bool", "u1", "i1", "i2", "u2", "i4", "u4", "i8", "u8", "f2", "f4", "f8", ">i4", ">f8"]),
    shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
)
trees = st.recursive(
    scalars | arrays,
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=4).map(tuple)
        | st.dictionaries(keys, children, max_size=4)
    ),
    max_leaves=20,
)


def same(a: object, b: object) -> bool:
    """Structural equality that also compares types, float bits and array dtype/shape/bytes."""
    if type(a) is not type(b):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and same_array(a, b)
    if isinstance(a, np.ndarray):
        return same_array(a, b)  # type: ignore[arg-type]
    if isinstance(a, float):
        return struct.pack("<d", a) == struct.pack("<d", b)  # type: ignore[arg-type]
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))  # type: ignore[arg-type]
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)  # type: ignore[call-overload]
    return a == b


def same_array(a: np.ndarray, b: np.ndarray) -> bool:
    return (
        a.shape == b.shape
        and a.dtype.newbyteorder("=") == b.dtype.newbyteorder("=")
        and np.array_equal(a, b, equal_nan=a.dtype.kind == "f")
    )


@settings(max_examples=60, deadline=None)
@given(trees)
def test_roundtrip_preserves_types_values_and_order(tree: object) -> None:
    decoded = decode_continuation(encode_continuation(tree))
    assert same(tree, decoded)


def test_scalars_and_containers_exactly() -> None:
    tree = {
        "none": None,
        "flags": [True, False],
        1: 2**80,
        False: -0.0,
        "float": 1e-310,
        "text": "ünïcode \udcff \x00",
        "nested": ({"t": ()}, [[]], {}),
    }
    decoded = ContinuationCodec.decode(ContinuationCodec.encode(tree))
    assert same(tree, decoded) and math.copysign(1.0, decoded[False]) == -1.0


def test_numpy_arrays_are_copied_writable_and_shared_objects_stay_shared() -> None:
    base = np.arange(24, dtype=np.int32).reshape(4, 6)
    view = base[:, ::2]  # non-contiguous
    decoded = decode_continuation(encode_continuation({"a": base, "b": [base, view]}))
    assert decoded["a"] is decoded["b"][0]
    assert np.array_equal(decoded["b"][1], view) and decoded["b"][1].flags.c_contiguous
    decoded["a"][0, 0] = 99  # writable


def test_blob_is_standard_safetensors() -> None:
    from safetensors.numpy import load

    blob = encode_continuation({"x": np.ones((2, 3), np.float32), "y": [np.arange(4, dtype=np.uint16)]})
    tensors = load(blob)
    assert sorted(tensors) == ["0", "1"]
    assert np.array_equal(tensors["0"], np.ones((2, 3), np.float32)) and tensors["1"].dtype == np.uint16
    header_len = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8 : 8 + header_len])
    assert json.loads(header["__metadata__"]["continuation"])["version"] == 2


class Custom:
    pass


def self_list() -> list[object]:
    loop: list[object] = [1]
    loop.append(loop)
    return loop


def self_dict() -> dict[str, object]:
    loop: dict[str, object] = {}
    loop["me"] = {"again": loop}
    return loop


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        ({"a": [1, float("nan")]}, r"tree\['a'\]\[1\]: non-finite"),
        ({"inf": float("inf")}, "non-finite"),
        (self_list(), "cycle"),
        (self_dict(), "cycle"),
        ({"s": {1, 2}}, "builtins.set"),
        (b"bytes", "builtins.bytes"),
        ({"obj": Custom()}, "Custom"),
        (collections.OrderedDict(a=1), "OrderedDict"),
        ({1.5: "float key"}, "key"),
        ({(1, 2): "tuple key"}, "key"),
        ({"x": np.float32(1.0)}, r"\.item\(\)"),
        ({"x": np.zeros(2, dtype=np.complex64)}, "complex64"),
        ({"x": np.array(["a"], dtype=object)}, "object"),
        ({"x": np.zeros(2, dtype=[("a", "i4")])}, "not supported"),
    ],
)
def test_unsupported_values_are_rejected_naming_the_path(tree: object, message: str) -> None:
    with pytest.raises(ContinuationError, match=message):
        encode_continuation(tree)


def test_deep_nesting_is_rejected_not_a_recursion_error() -> None:
    tree: list[object] = []
    for _ in range(300):
        tree = [tree]
    with pytest.raises(ContinuationError, match="deeper"):
        encode_continuation(tree)


def test_decode_never_unpickles(monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    def refuse(*args: object, **kwargs: object) -> object:
        raise AssertionError("pickle was used")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)
    tree = {"a": np.ones(3), "b": [1, "x", (None,)]}
    assert same(decode_continuation(encode_continuation(tree)), tree)
