"""cpu_int4: both call paths (decode kernel, tiled dequantize + GEMM) and what the module holds in memory."""

import os

import numpy as np
import pytest
import torch
from qkernels import KernelInputError, quant_linear, quant_linear_from_weight
from qkernels.backends.cpu_int4 import (
    DEQUANT_FROM,
    LONG_FROM,
    SHORT_TILE,
    WHOLE_WEIGHT_BUDGET,
    WHOLE_WEIGHT_FROM,
    prefill_tile,
)
from qkernels.checkpoint import pack_weight
from qkernels.cpu_extension import extension_reasons
from qkernels.int4_packing import pack_rows_gptq
from qkernels.testing.cases import LayerCase, float_reference, make_activations, make_bias, make_weight, tolerance

NO_CPU_EXTENSION = "; ".join(extension_reasons())
if NO_CPU_EXTENSION and os.environ.get("LOWBIT_REQUIRE_CPU_EXTENSION"):
    raise RuntimeError(f"LOWBIT_REQUIRE_CPU_EXTENSION is set but cpu_int4 cannot build: {NO_CPU_EXTENSION}")
pytestmark = pytest.mark.skipif(bool(NO_CPU_EXTENSION), reason=f"cpu_int4 unavailable: {NO_CPU_EXTENSION}")

# out = SHORT_TILE + 8: the dequantize path ends on a partial tile; the decode path on a lone vector.
WIDE = LayerCase("gptq", 4, 64, False, SHORT_TILE + 8, 192, bias=True)
ACT = LayerCase("gptq_v2", 4, 32, False, 40, 128, act_order=True)
AWQ = LayerCase("gemm", 4, 64, False, 24, 128)
# SmolLM2's 576 inputs with group 128: a partial last group of 64; act-order over the same groups.
PARTIAL = LayerCase("gptq", 4, 128, False, SHORT_TILE + 24, 576)
PARTIAL_ACT = LayerCase("gptq_v2", 4, 128, True, 136, 576, act_order=True)


def build(case: LayerCase, **options: object) -> torch.nn.Module:
    tensors, meta = pack_weight(make_weight(case), case.fmt, bias=make_bias(case))
    return quant_linear(case.fmt, tensors, meta, backend="cpu_int4", **options)


@pytest.mark.parametrize("case", [WIDE, ACT, AWQ], ids=str)
@pytest.mark.parametrize("dequant_from", [1, DEQUANT_FROM, 10**6], ids=["dequant", "default", "decode"])
def test_every_row_count_matches_the_reference_on_both_paths(case: LayerCase, dequant_from: int) -> None:
    module = build(case, dequant_from=dequant_from)
    weight, bias = make_weight(case), make_bias(case)
    for rows in (1, 2, 3, DEQUANT_FROM - 1, DEQUANT_FROM, DEQUANT_FROM + 1, 33):
        x = make_activations(case, rows, torch.float32, seed=rows)
        err = (module(x).double() - float_reference(x, weight, bias)).abs()
        assert float((err - tolerance(x, weight, bias, torch.float32)).max()) <= 0, (case, rows, dequant_from)


@pytest.mark.parametrize("case", [PARTIAL, PARTIAL_ACT, WIDE], ids=str)
def test_prefill_tiles_match_the_reference_at_every_tile_width(case: LayerCase) -> None:
    """Row counts on each side of each tile-width switch (short, long, whole weight) and partial tiles."""
    module = build(case)
    weight, bias = make_weight(case), make_bias(case)
    for rows in (DEQUANT_FROM, 100, LONG_FROM - 1, LONG_FROM, 300, WHOLE_WEIGHT_FROM - 1, WHOLE_WEIGHT_FROM):
        x = make_activations(case, rows, torch.float32, seed=rows)
        err = (module(x).double() - float_reference(x, weight, bias)).abs()
        assert float((err - tolerance(x, weight, bias, torch.float32)).max()) <= 0, (case, rows)


@pytest.mark.parametrize("rows", [DEQUANT_FROM, LONG_FROM, WHOLE_WEIGHT_FROM, 10**5])
@pytest.mark.parametrize("shape", [(576, 1536), (1536, 576), (4096, 4096), (8192, 4096), (64, 8)])
def test_prefill_tile_is_a_valid_width_within_the_scratch_budget(rows: int, shape: tuple[int, int]) -> None:
    k, n = shape
    tile = prefill_tile(rows, k, n)
    assert 0 < tile <= n and tile % 8 == 0
    assert 4 * k * tile <= max(WHOLE_WEIGHT_BUDGET, 4 * k * 2048)
    if rows >= WHOLE_WEIGHT_FROM and 4 * k * n <= WHOLE_WEIGHT_BUDGET:
        assert tile == n  # the whole weight in one scratch: the activations stream through the GEMM once
    if rows < LONG_FROM:
        assert tile == min(SHORT_TILE, n)


def test_the_paths_agree_with_each_other_in_bfloat16() -> None:
    decode, dequant = build(WIDE, dequant_from=10**6), build(WIDE, dequant_from=1)
    x = make_activations(WIDE, 5, torch.bfloat16)
    a, b = decode(x), dequant(x)
    assert a.dtype == b.dtype == torch.bfloat16
    weight, bias = make_weight(WIDE), make_bias(WIDE)
    tol = tolerance(x, weight, bias, torch.bfloat16)
    for y in (a, b):
        assert float(((y.double() - float_reference(x, weight, bias)).abs() - tol).max()) <= 0


@pytest.mark.parametrize("fmt", ["gptq", "gptq_v2"])
def test_gptq_int32_qweight_is_the_kernel_layout(fmt: str) -> None:
    """The kernel reads these checkpoints' qweight in place, which is only right if the layouts agree."""
    weight = make_weight(LayerCase(fmt, 4, 128, False, 48, 256))
    tensors, _ = pack_weight(weight, fmt)
    assert np.array_equal(pack_rows_gptq(torch.from_numpy(weight.codes.T.copy())).numpy(), tensors["qweight"])


def test_gptq_module_holds_one_copy_of_the_codes() -> None:
    case = LayerCase("gptq", 4, 128, False, 256, 1024)
    module = build(case)
    codes_bytes = case.out_features * case.in_features // 2
    held = {name: b.numel() * b.element_size() for name, b in module.named_buffers() if b is not None}
    assert held["qweight"] == codes_bytes
    # Everything else is per group: checkpoint scales/qzeros/g_idx plus float32 scales and zeros [G, out].
    groups = case.in_features // case.group_size
    assert sum(held.values()) - codes_bytes <= 4 * case.in_features + 12 * groups * case.out_features
    assert module._logical is None  # the uint8 codes (one byte per weight) are not kept
    assert np.array_equal(module.logical.codes, make_weight(case).codes)  # unpacked on demand


@pytest.mark.parametrize("case", [ACT, AWQ], ids=str)
def test_repacked_layouts_keep_checkpoint_tensors_and_runtime_words(case: LayerCase) -> None:
    module = build(case)
    tensors, _ = pack_weight(make_weight(case), case.fmt, bias=make_bias(case))
    assert set(module.state_dict()) == set(tensors)
    assert module._kn8.shape == (case.in_features // 8, case.out_features)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "16"])
def test_dequant_from_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(KernelInputError, match="dequant_from"):
        quant_linear_from_weight(make_weight(AWQ), "gemm", backend="cpu_int4", dequant_from=bad)
