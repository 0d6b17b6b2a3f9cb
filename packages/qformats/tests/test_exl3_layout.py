"""EXL3: trellis symbol packing, tail-biting states, codebooks, a golden decode from the reference, refusals."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from qformats.errors import LayoutError
from qformats.layouts.exl3 import EXL3Weight, pack_exl3, unpack_exl3, validate_exl3
from qformats.layouts.exl3.logical import hadamard
from qformats.layouts.exl3.trellis import pack_symbols, states, tile_perm, unpack_symbols

# GPT-QModel 7.7.0's ExllamaV3TorchLinear._decode_inner_weight() of golden_tensors() (mcg, 3 bits);
# tests-interop/test_exl3_vs_reference.py re-derives it from the reference.
GOLDEN_INNER_SHA256 = "edb70c044b55bbdae9236224f1dd265b8aa1bed542656018674fd7e6d23b7f98"
GOLDEN_INNER_ROW0 = [-0.700927734375, 1.10498046875, 0.22705078125, 0.745849609375]
GOLDEN_INNER_17_5 = -0.39892578125


def golden_tensors() -> dict[str, np.ndarray]:
    k, n, bits = 128, 128, 3
    i = np.arange(k // 16 * n // 16 * 16 * bits, dtype=np.int64)
    trellis = ((i * 40503 + 12345) % 65536).astype(np.uint16).view(np.int16).reshape(k // 16, n // 16, 16 * bits)
    return {
        "trellis": trellis,
        "suh": np.linspace(0.5, 1.5, k, dtype=np.float32).astype(np.float16),
        "svh": np.linspace(1.5, 0.5, n, dtype=np.float32).astype(np.float16),
        "mcg": np.zeros((1,), np.int32),
    }


def test_golden_inner_weight_matches_the_reference() -> None:
    w = unpack_exl3(golden_tensors(), 128, 128)
    assert (w.bits, w.codebook) == (3, "mcg")
    inner = w.inner()
    assert hashlib.sha256(inner.tobytes()).hexdigest() == GOLDEN_INNER_SHA256
    assert inner[0, :4].tolist() == GOLDEN_INNER_ROW0 and float(inner[17, 5]) == GOLDEN_INNER_17_5


def test_symbol_layout_by_hand() -> None:
    # 4 bits: word pairs swapped, each group of 4 words a big-endian stream of 16 nibbles.
    symbols = np.zeros((1, 256), np.uint8)
    symbols[0, :5] = [1, 2, 3, 4, 5]
    words = pack_symbols(symbols, 4).view(np.uint16)
    assert words.shape == (1, 64) and words[0, :2].tolist() == [0x5000, 0x1234]
    assert np.array_equal(unpack_symbols(words.view(np.int16), 4), symbols)
    # the state of a position: the last ceil(16 / b) symbols, newest lowest, wrapping around the tile
    ramp = (np.arange(256) % 16).astype(np.uint8)
    s = states(ramp, 4)
    assert int(s[4]) == 0x1234 and int(s[0]) == 0xDEF0 and int(s[1]) == 0xEF01


def test_tile_perm_and_hadamard() -> None:
    perm = tile_perm()
    assert np.array_equal(np.sort(perm), np.arange(256)) and perm[:4].tolist() == [0, 16, 128, 144]
    h = hadamard()
    assert np.allclose(h @ h.T, np.eye(128), atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(bits=st.integers(1, 8), tiles=st.sampled_from([(8, 8), (16, 8)]), seed=st.integers(0, 2**32 - 1))
def test_round_trip_is_identity(bits: int, tiles: tuple[int, int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    symbols = rng.integers(0, 1 << bits, (*tiles, 256)).astype(np.uint8)
    k, n = tiles[0] * 16, tiles[1] * 16
    w = EXL3Weight(symbols, bits, "mul1", rng.random(k).astype(np.float16), rng.random(n).astype(np.float16))
    tensors = pack_exl3(w)
    assert validate_exl3(tensors, k, n) == []
    back = unpack_exl3(tensors, k, n)
    assert np.array_equal(back.symbols, symbols) and back.codebook == "mul1" and back.bits == bits
    assert np.array_equal(pack_exl3(back)["trellis"], tensors["trellis"])
    assert np.array_equal(back.dequantize(), w.dequantize())


def test_malformed_tensors_are_named() -> None:
    tensors = golden_tensors()

    def rules(t: dict[str, np.ndarray], k: int = 128, n: int = 128) -> list[str]:
        return [v.rule for v in validate_exl3(t, k, n)]

    assert rules({k: v for k, v in tensors.items() if k != "svh"}) == ["EXL3-MISSING"]
    assert rules({**tensors, "trellis": tensors["trellis"].astype(np.int32)}) == ["EXL3-DTYPE-TRELLIS"]
    assert rules({**tensors, "trellis": tensors["trellis"][..., :40]}) == ["EXL3-BITS"]
    assert rules({**tensors, "suh": tensors["suh"][:64]}) == ["EXL3-SHAPE-SUH"]
    assert rules(tensors, k=256) == ["EXL3-SHAPE-TRELLIS", "EXL3-SHAPE-SUH"]
    assert rules(tensors, n=96) == ["EXL3-DIMS"]
    assert rules({**tensors, "mul1": np.zeros((1,), np.int32)}) == ["EXL3-CODEBOOK"]
    assert rules({**tensors, "su": np.ones(128, np.float16)}) == ["EXL3-UNSUPPORTED"]
    bad = tensors["svh"].copy()
    bad[3] = np.inf
    assert rules({**tensors, "svh": bad}) == ["EXL3-SCALE-VALUE"]
    with pytest.raises(LayoutError, match=r"\[EXL3-SHAPE-SUH\] suh: expected shape \(128,\)"):
        unpack_exl3({**tensors, "suh": tensors["suh"][:64]}, 128, 128)
    with pytest.raises(LayoutError, match="codebook: expected one of"):
        EXL3Weight(np.zeros((8, 8, 256), np.uint8), 2, "nf4", np.ones(128), np.ones(128))
    with pytest.raises(LayoutError, match="symbols: expected 2-bit codes"):
        EXL3Weight(np.full((8, 8, 256), 4, np.uint8), 2, "mcg", np.ones(128), np.ones(128))
