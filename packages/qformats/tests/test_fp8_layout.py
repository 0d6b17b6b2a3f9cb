"""FP8 weights: the reference quantizer, both scale conventions, config rules and module tensors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qformats.errors import ConfigError, LayoutError
from qformats.layouts.fp8 import (
    FP8ScaleAmbiguityError,
    FP8Weight,
    pack_fp8,
    scheme_from_config,
    unpack_fp8,
    validate_fp8,
)


def _torch_reference(w: np.ndarray, name: str, method: str, block: tuple[int, int] | None) -> tuple:
    """The reference toolkit's quantize_fp8_weight, restated in torch for the comparison."""
    dtype = getattr(torch, name)
    top = torch.finfo(dtype).max
    x = torch.from_numpy(w)

    def inv(absmax: torch.Tensor) -> torch.Tensor:
        eps = torch.finfo(torch.float32).tiny
        return torch.where(absmax > 0, torch.full_like(absmax, top) / absmax.clamp_min(eps), torch.ones_like(absmax))

    if method == "tensor":
        s = inv(x.abs().amax())
        q = torch.clamp(x * s, -top, top).to(dtype)
    elif method == "row":
        s = inv(x.abs().amax(dim=1))
        q = torch.clamp(x * s.unsqueeze(1), -top, top).to(dtype)
    else:
        br, bc = block  # type: ignore[misc]
        b = x.reshape(x.shape[0] // br, br, x.shape[1] // bc, bc)
        s = inv(b.abs().amax(dim=(1, 3)))
        q = torch.clamp(b * s.unsqueeze(1).unsqueeze(3), -top, top).to(dtype).reshape(x.shape)
    deq = (q.float() / (s if method == "tensor" else s.unsqueeze(1) if method == "row" else
                        s.repeat_interleave(block[0], 0).repeat_interleave(block[1], 1)))  # type: ignore[index]  # fmt: skip
    return q.view(torch.uint8).numpy(), s.numpy(), deq.numpy()


@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"])
@pytest.mark.parametrize(("method", "block"), [("tensor", None), ("row", None), ("block", (4, 8))])
def test_quantize_matches_reference_bit_for_bit(name: str, method: str, block: tuple[int, int] | None) -> None:
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 32)) * rng.uniform(1e-4, 30, (8, 1))).astype(np.float32)
    w[3] = 0.0  # an all-zero row (scale 1)
    q = FP8Weight.quantize(w, format=name, method=method, block_size=block)
    codes, scale, deq = _torch_reference(w, name, method, block)
    assert np.array_equal(q.codes, codes)
    assert q.scale_inv.dtype == np.float32 and np.array_equal(q.scale_inv, scale)
    assert np.array_equal(q.dequantize(), deq)


def test_multiplier_semantics_multiplies() -> None:
    codes = FP8Weight.quantize(np.ones((2, 4), np.float32)).codes  # every code is 448
    w = FP8Weight(codes, np.array([0.5, 2.0], np.float32), semantics="multiplier")
    assert np.array_equal(w.dequantize(), np.array([[224.0] * 4, [896.0] * 4], np.float32))
    assert np.array_equal(FP8Weight(codes, np.array([0.5, 2.0], np.float32)).dequantize()[0], [896.0] * 4)


def test_config_must_state_semantics() -> None:
    w = FP8Weight.quantize(np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32))
    tensors = pack_fp8(w)
    with pytest.raises(FP8ScaleAmbiguityError, match="refusing to guess"):
        unpack_fp8(tensors, {"format": "float8_e4m3fn"})
    inverse = unpack_fp8(tensors, {"format": "float8_e4m3fn", "weight_scale_semantics": "inverse"})
    assert np.array_equal(inverse.dequantize(), w.dequantize())
    explicit = unpack_fp8(tensors, {"fmt": "e4m3"}, semantics="multiplier")
    assert explicit.semantics == "multiplier"
    with pytest.raises(ConfigError, match="config says 'inverse', caller says 'multiplier'"):
        unpack_fp8(tensors, {"weight_scale_semantics": "inverse"}, semantics="multiplier")
    with pytest.raises(ConfigError, match="expected one of"):
        unpack_fp8(tensors, {"weight_scale_semantics": "divide"})


def test_scheme_defaults_and_refusals() -> None:
    assert scheme_from_config({}) == ("float8_e4m3fn", "row", None)
    assert scheme_from_config({"weight_block_size": [128, 128]}) == ("float8_e4m3fn", "block", (128, 128))
    with pytest.raises(ConfigError, match="weight_scale_method is 'row'"):
        scheme_from_config({"weight_block_size": [2, 2], "weight_scale_method": "row"})
    with pytest.raises(ConfigError, match="needs weight_block_size"):
        scheme_from_config({"weight_scale_method": "block"})
    with pytest.raises(LayoutError, match="not divisible by weight_block_size"):
        FP8Weight.quantize(np.ones((6, 8), np.float32), method="block", block_size=(4, 4))
    with pytest.raises(LayoutError, match="finite"):
        FP8Weight.quantize(np.array([[np.inf, 1.0]], np.float32))


def test_validate_names_tensors() -> None:
    cfg = {"weight_block_size": [2, 4]}
    good = pack_fp8(FP8Weight.quantize(np.ones((4, 8), np.float32), method="block", block_size=(2, 4)))
    assert validate_fp8(good, cfg) == []
    bad = {"weight": good["weight"], "weight_scale_inv": np.ones((2, 3), np.float32)}
    assert [v.rule for v in validate_fp8(bad, cfg)] == ["FP8-SCALE-SHAPE"]
    zero = {"weight": good["weight"], "weight_scale_inv": np.zeros((2, 2), np.float32)}
    assert [v.rule for v in validate_fp8(zero, cfg)] == ["FP8-SCALE-VALUE"]
    assert [v.tensor for v in validate_fp8({}, cfg)] == ["weight", "weight_scale_inv"]
    with pytest.raises(LayoutError, match="FP8-SCALE-SHAPE"):
        unpack_fp8(bad, {**cfg, "weight_scale_semantics": "inverse"})


def test_pack_does_not_alias_input() -> None:
    w = FP8Weight.quantize(np.ones((2, 4), np.float32))
    tensors = pack_fp8(w)
    tensors["weight"][:] = 0
    assert w.codes.max() > 0
