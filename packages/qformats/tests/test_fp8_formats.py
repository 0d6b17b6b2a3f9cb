"""FP8 element formats: decode tables and encoding bit for bit against torch's float8 casts."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qformats.errors import UnsupportedLayoutError
from qformats.layouts.fp8 import FORMATS, fp8_format
from qformats.layouts.fp8.torch_adapter import from_torch, to_torch

ENCODABLE = ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"]


def _torch_codes(values: np.ndarray, name: str) -> np.ndarray:
    return torch.from_numpy(values).to(getattr(torch, name)).view(torch.uint8).numpy()


@pytest.mark.parametrize("name", list(FORMATS))
def test_tables_match_torch(name: str) -> None:
    ours = FORMATS[name].table
    theirs = torch.arange(256, dtype=torch.uint8).view(getattr(torch, name)).float().numpy()
    assert np.array_equal(ours, theirs, equal_nan=True)
    assert np.array_equal(np.signbit(ours), np.signbit(theirs)) or name.endswith("fnuz") or name.endswith("fnu")
    assert FORMATS[name].max == float(torch.finfo(getattr(torch, name)).max)


@pytest.mark.parametrize("name", ENCODABLE)
def test_encode_matches_torch_on_midpoints_and_specials(name: str) -> None:
    fmt = FORMATS[name]
    finite = fmt.table[:128][np.isfinite(fmt.table[:128])].astype(np.float64)
    pos = np.unique(finite)
    mids = ((pos[1:] + pos[:-1]) / 2).astype(np.float32)
    probes = np.concatenate([mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0)), pos])
    special = [np.inf, np.nan, 0.0, fmt.max * 1.03, fmt.max * 1.07, fmt.max * 9, 1e-45, 3e38]
    probes = np.concatenate([probes, special]).astype(np.float32)
    probes = np.concatenate([probes, -probes])
    assert np.array_equal(fmt.encode(probes), _torch_codes(probes, name))


@pytest.mark.parametrize("name", ENCODABLE)
def test_encode_matches_torch_on_random_bit_patterns(name: str) -> None:
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    scaled = (rng.standard_normal(200_000) * np.exp2(rng.uniform(-24, 20, 200_000))).astype(np.float32)
    for values in (raw, scaled):
        assert np.array_equal(FORMATS[name].encode(values), _torch_codes(values, name))


def test_e8m0_is_decode_only_and_aliases_resolve() -> None:
    with pytest.raises(UnsupportedLayoutError, match="decode-only"):
        FORMATS["float8_e8m0fnu"].encode(np.ones(2, np.float32))
    assert fp8_format("e4m3").name == "float8_e4m3fn" and fp8_format("E5M2").name == "float8_e5m2"
    with pytest.raises(UnsupportedLayoutError, match="float8_e3m4"):
        fp8_format("float8_e3m4")


def test_torch_adapter_round_trip() -> None:
    codes = np.arange(256, dtype=np.uint8).reshape(16, 16)
    t = to_torch(codes, "e5m2")
    assert t.dtype == torch.float8_e5m2
    back, name = from_torch(t)
    assert name == "float8_e5m2" and np.array_equal(back, codes)
