"""Stored bits of a module are the bytes its layout packs, at any shape and width; a width it cannot hold is
refused naming the layout and the reason."""

from __future__ import annotations

import numpy as np
import pytest
from qformats.errors import LayoutError
from qformats.layouts.registry import get_layout
from qformats.layouts.stored_size import stored_bits, zero_probe
from qformats.logical import QuantizedWeight, default_g_idx, group_count


def _random_weight(out: int, in_: int, bits: int, group: int) -> QuantizedWeight:
    rng = np.random.default_rng(bits * 1000 + out)
    groups = group_count(in_, group)
    return QuantizedWeight(
        codes=rng.integers(0, 1 << bits, size=(out, in_), dtype=np.uint8),
        scales=rng.uniform(0.01, 0.1, size=(groups, out)).astype(np.float16),
        zeros=np.full((groups, out), 1 << (bits - 1), dtype=np.int32),
        g_idx=default_g_idx(in_, group),
        bits=bits,
        group_size=group,
        sym=True,
    )


@pytest.mark.parametrize("layout", ["gptq", "gptq_v2", "gptq_p"])
@pytest.mark.parametrize(("out", "in_", "group"), [(576, 576, 128), (192, 576, 128), (576, 1536, 64), (64, 96, -1)])
@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_stored_bits_are_the_packed_bytes(layout: str, out: int, in_: int, group: int, bits: int) -> None:
    packed = get_layout(layout).pack(_random_weight(out, in_, bits, group))
    assert stored_bits(layout, out, in_, bits, group) == 8 * sum(a.nbytes for a in packed.values())


def test_gptq_4bit_g128_is_codes_scales_zeros_and_g_idx() -> None:
    # [576 x 576]: codes 4 bits each, per group of 128 (5 groups, the last partial) a float16 scale and a
    # 4-bit zero per output, and an int32 g_idx entry per input column
    expected = 576 * 576 * 4 + 5 * 576 * 16 + 5 * 576 * 4 + 576 * 32
    assert stored_bits("gptq", 576, 576, 4, 128) == expected


def test_a_width_the_layout_cannot_hold_is_refused() -> None:
    with pytest.raises(LayoutError, match=r"layout 'gemv' cannot hold a \[64 x 128\] module at 3-bit"):
        stored_bits("gemv", 64, 128, 3, 64)
    probe = zero_probe(8, 32, 3, 16)
    assert probe.codes.shape == (8, 32) and int(probe.zeros[0, 0]) == 4 and probe.scales.shape == (2, 8)
