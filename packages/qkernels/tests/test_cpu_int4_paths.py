"""cpu_int4: both call paths (decode kernel, tiled dequantize + GEMM) and what the module holds in memory."""

import os

import numpy as np
import pytest
import torch
from qkernels import KernelInputError, quant_linear, quant_linear_from_weight
from qkernels.backends.cpu_int4 import DEQUANT_FROM, DEQUANT_TILE
from qkernels.checkpoint import pack_weight
from qkernels.cpu_extension import extension_reasons
from qkernels.int4_packing import pack_rows_gptq
from qkernels.testing.cases import LayerCase, float_reference, make_activations, make_bias, make_weight, tolerance

NO_CPU_EXTENSION = "; ".join(extension_reasons())
if NO_CPU_EXTENSION and os.environ.get("LOWBIT_REQUIRE_CPU_EXTENSION"):
    raise RuntimeError(f"LOWBIT_REQUIRE_CPU_EXTENSION is set but cpu_int4 cannot build: {NO_CPU_EXTENSION}")
pytestmark = pytest.mark.skipif(bool(NO_CPU_EXTENSION), reason=f"cpu_int4 unavailable: {NO_CPU_EXTENSION}")

# out = DEQUANT_TILE + 8: the dequantize path ends on a partial tile; the decode path on a lone vector.
WIDE = LayerCase("gptq", 4, 64, False, DEQUANT_TILE + 8, 192, bias=True)
ACT = LayerCase("gptq_v2", 4, 32, False, 40, 128, act_order=True)
AWQ = LayerCase("gemm", 4, 64, False, 24, 128)


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
