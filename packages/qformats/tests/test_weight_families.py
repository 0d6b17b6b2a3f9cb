"""The weight-family registry: every family found by key, config, logical object and marker; duplicates
refused; unknown values named with the known ones."""

from __future__ import annotations

import numpy as np
import pytest
from qformats.config import WEIGHT_ONLY_METHODS
from qformats.errors import DuplicateRegistrationError, UnsupportedLayoutError
from qformats.layouts.bnb import BnB4Weight, BnB8Weight, pack_bnb4, pack_bnb8
from qformats.layouts.families import (
    BUILTIN_FAMILY_KEYS,
    FamilyInputError,
    ModuleInput,
    family_by_marker,
    family_for_config,
    family_for_tensors,
    family_methods,
    family_of,
    get_family,
    marker_suffixes,
    register_family,
    registered_families,
    weight_only_keys,
    weight_only_methods,
)
from qformats.layouts.fp8 import FP8Weight
from qformats.layouts.gguf import GGUFWeight
from qformats.logical import QuantizedWeight

RNG = np.random.default_rng(0)
W = RNG.standard_normal((8, 64)).astype(np.float32)


def test_builtin_keys_are_registered_in_order() -> None:
    assert tuple(f.key for f in registered_families()) == BUILTIN_FAMILY_KEYS
    assert weight_only_keys() == ("fp8", "bnb4", "int8", "gguf")
    assert weight_only_methods() == ("fp8", "bitsandbytes", "gguf") == WEIGHT_ONLY_METHODS
    assert family_methods() == ("fp8", "bitsandbytes", "gguf", "qqq", "paroquant", "vptq", "exl3")


@pytest.mark.parametrize(
    ("method", "fmt", "key"),
    [
        ("fp8", "float8_e4m3fn", "fp8"),
        ("bitsandbytes", "nf4", "bnb4"),
        ("bitsandbytes", "fp4", "bnb4"),
        ("bitsandbytes", "int8", "int8"),
        ("gguf", "q_k_m", "gguf"),
        ("qqq", "qqq", "qqq"),
        ("paroquant", "paroquant", "paroquant"),
        ("gptq", "gptq", "integer"),
        ("awq", "gemm", "integer"),
    ],
)
def test_family_for_config(method: str, fmt: str, key: str) -> None:
    assert family_for_config(method, fmt).key == key


def test_family_of_logical_objects() -> None:
    fp8 = FP8Weight.quantize(W, format="float8_e4m3fn", method="row")
    bnb4 = BnB4Weight.quantize(W, quant_type="nf4", blocksize=64, compress_statistics=True, dtype="float32")
    bnb8 = BnB8Weight.quantize(W)
    gguf = GGUFWeight.quantize(W, "Q4_0")
    for weight, key in ((fp8, "fp8"), (bnb4, "bnb4"), (bnb8, "int8"), (gguf, "gguf")):
        family = family_of(weight)
        assert family.key == key
        assert family.shape(weight) == (8, 64)
        assert family.pack is not None
    integer = QuantizedWeight(
        np.zeros((8, 64), np.uint8), np.ones((2, 8), np.float32), np.zeros((2, 8), np.int32),
        np.repeat(np.arange(2, dtype=np.int32), 32), bits=4, group_size=32, sym=True,
    )  # fmt: skip
    assert family_of(integer).key == "integer" and get_family("integer").shape(integer) == (8, 64)
    with pytest.raises(UnsupportedLayoutError, match=r"no weight family for a ndarray; known: integer, fp8, bnb4"):
        family_of(W)


def test_family_by_marker_and_tensors() -> None:
    assert family_by_marker(["weight", "weight_scale_inv"]).key == "fp8"
    assert family_by_marker(["weight", "weight_scb"], "bitsandbytes").key == "int8"
    assert family_by_marker(["weight", "weight_absmax", "weight_quant_map"], "bitsandbytes").key == "bnb4"
    assert family_by_marker(["bias"]) is None
    with pytest.raises(UnsupportedLayoutError, match=r"several families \['gguf', 'paroquant'\]"):
        family_by_marker(["qweight"])
    assert marker_suffixes("bitsandbytes") == ("weight_quant_map", "weight_scb")
    bnb4 = pack_bnb4(BnB4Weight.quantize(W, quant_type="fp4", blocksize=64, compress_statistics=False))
    assert family_for_tensors("bitsandbytes", bnb4).key == "bnb4"
    assert family_for_tensors("bitsandbytes", pack_bnb8(BnB8Weight.quantize(W))).key == "int8"
    with pytest.raises(FamilyInputError, match="bitsandbytes: tensor 'weight' is missing"):
        family_for_tensors("bitsandbytes", {})
    with pytest.raises(FamilyInputError, match=r"family 'nf4': expected one of fp8, bitsandbytes, gguf, qqq"):
        family_for_tensors("nf4", {})


def test_read_recovers_the_packed_weight() -> None:
    family = get_family("int8")
    weight = BnB8Weight.quantize(W)
    assert family.read is not None and family.pack is not None
    read = family.read(family.pack(weight), ModuleInput(64, 8))
    assert (read.bits, read.group_size) == (8, -1)
    assert np.array_equal(np.asarray(read.logical.dequantize()), np.asarray(weight.dequantize()))
    gguf = get_family("gguf")
    with pytest.raises(FamilyInputError, match="qtype="):
        gguf.read({"qweight": np.zeros((8, 18), np.uint8)}, ModuleInput(64, 8))  # type: ignore[misc]


def test_duplicate_registration_is_an_error() -> None:
    with pytest.raises(DuplicateRegistrationError, match="weight family 'bnb4' is already registered"):
        register_family(get_family("bnb4"))


def test_unknown_family_names_the_value_and_the_known_ones() -> None:
    with pytest.raises(UnsupportedLayoutError, match=r"'bitsandbytes'; known: integer, fp8, bnb4, int8, gguf"):
        get_family("bitsandbytes")
    assert family_for_config("bitsandbytes", None).key == "bnb4"  # the formats int8 does not list
