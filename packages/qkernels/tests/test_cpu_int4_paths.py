"""cpu_int4: the three call paths (decode kernel, fused kernel, tiled dequantize + GEMM) and what the module
holds in memory."""

import os
import threading

import numpy as np
import pytest
import torch
from qkernels import KernelInputError, quant_linear, quant_linear_from_weight
from qkernels.backends.cpu_int4 import (
    DEQUANT_FROM,
    LONG_FROM,
    SHORT_TILE,
    TILES_FROM,
    WHOLE_WEIGHT_BUDGET,
    WHOLE_WEIGHT_FROM,
    prefill_tile,
)
from qkernels.checkpoint import pack_weight
from qkernels.cpu_extension import extension_reasons, load_extension
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


PATHS = {  # options forcing one path whatever the row count ("auto": the defaults)
    "decode": {"dequant_from": 10**6, "tiles_from": 10**6},
    "fused": {"dequant_from": 1, "tiles_from": 10**6},
    "tiles": {"dequant_from": 1, "tiles_from": 1},
    "auto": {},
}


def assert_matches_reference(module: torch.nn.Module, case: LayerCase, rows: int) -> torch.Tensor:
    weight, bias = make_weight(case), make_bias(case)
    x = make_activations(case, rows, torch.float32, seed=rows)
    y = module(x)
    err = (y.double() - float_reference(x, weight, bias)).abs()
    assert float((err - tolerance(x, weight, bias, torch.float32)).max()) <= 0, (case, rows)
    return y


@pytest.mark.parametrize("case", [WIDE, ACT, AWQ], ids=str)
@pytest.mark.parametrize("path", PATHS)
def test_every_row_count_matches_the_reference_on_every_path(case: LayerCase, path: str) -> None:
    module = build(case, **PATHS[path])
    for rows in (1, 2, 3, DEQUANT_FROM - 1, DEQUANT_FROM, DEQUANT_FROM + 1, 33):
        assert_matches_reference(module, case, rows)


def test_the_automatic_choice_switches_paths_at_its_row_counts() -> None:
    module = build(WIDE)
    assert module.isa in ("avx2", "avx512")
    assert module.dequant_from == DEQUANT_FROM and module.tiles_from == TILES_FROM[module.isa]
    assert module.threaded_tiles_from is None  # more than one thread: the fused kernel at every row count
    decode, fused, tiles = (build(WIDE, **PATHS[path]) for path in ("decode", "fused", "tiles"))
    twins = {"decode": decode, "fused": fused, "tiles": tiles}
    threads = torch.get_num_threads()
    try:
        for n_threads, last in ((1, "tiles"), (2, "fused")):
            torch.set_num_threads(n_threads)
            cases = [(module.dequant_from - 1, "decode"), (module.dequant_from, "fused")]
            cases += [(module.tiles_from - 1, "fused"), (module.tiles_from, last), (10**4, last)]
            for rows, path in cases:
                assert module.path_for(rows) == path, (n_threads, rows)
                if rows < 10**4:
                    x = make_activations(WIDE, rows, torch.float32, seed=rows)
                    assert torch.equal(module(x), twins[path](x)), (n_threads, rows)
    finally:
        torch.set_num_threads(threads)
    explicit = build(WIDE, tiles_from=50)
    assert explicit.path_for(50, threads=1) == explicit.path_for(50, threads=2) == "tiles"


# Row counts around the fused kernel's blocks: 12 rows (AVX-512) or 6 (AVX2) per micro-kernel call, 252 or
# 256 rows per row block; K blocks of 256 inputs (576 inputs: two full and a partial one).
FUSED_ROWS = (4, 5, 6, 7, 11, 12, 13, 25, 251, 252, 253, 256, 257, 300)


@pytest.mark.parametrize("case", [PARTIAL, PARTIAL_ACT, WIDE, ACT], ids=str)
def test_fused_kernel_matches_the_reference_at_block_edges(case: LayerCase) -> None:
    """Partial panels (out 40, 136, 152: a last panel of 8 or 24 columns), partial K blocks and row blocks."""
    module = build(case, **PATHS["fused"])
    for rows in FUSED_ROWS:
        assert_matches_reference(module, case, rows)


@pytest.mark.parametrize("kernel", ["int4_kn8_fused_mm", "int4_kn8_gemv"])
@pytest.mark.parametrize("rows", [1, 2, 3, 29])
def test_kernels_are_independent_of_isa_and_thread_count(kernel: str, rows: int) -> None:
    """The fused kernel's outputs are each one FMA chain over k in order, and the decode kernel's AVX-512
    lanes run the AVX2 lanes' operations: either ISA and any thread count give the same bits."""
    ext = load_extension()
    fn = getattr(ext, kernel)
    case = LayerCase("gptq", 4, 128, False, 1032, 576)  # 1032 = 16 * 64 + 8: every column block kind
    module = build(case, **PATHS["fused"])
    x = make_activations(case, rows, torch.float32)
    args = (x, module.qweight, module._scales, module._zeros, case.group_size)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = fn(*args, "avx2")
        assert_matches_reference(module, case, rows)
        torch.set_num_threads(2)
        assert torch.equal(fn(*args, "avx2"), one)
        if ext.fused_isa() == "avx512":
            assert torch.equal(fn(*args, "avx512"), one)
            assert torch.equal(fn(*args, "auto"), one)
        else:
            with pytest.raises(RuntimeError, match="AVX-512"):
                fn(*args, "avx512")
    finally:
        torch.set_num_threads(threads)
    with pytest.raises(RuntimeError, match="isa must be"):
        fn(*args, "sse")


@pytest.mark.parametrize("path", ["fused", "tiles"])
def test_concurrent_calls_from_two_threads_give_the_single_thread_results(path: str) -> None:
    """The fused kernel's panel buffers are per thread; two Python threads calling at once (the kernels
    release the GIL; one torch thread each, so neither waits for the helper pool; different layer widths, so
    a shared buffer would be overwritten mid-call) must each get their own results."""
    cases = [LayerCase("gptq", 4, 128, False, 1032, 576), LayerCase("gptq", 4, 64, False, 1024, 1024)]
    modules = [build(case, **PATHS[path]) for case in cases]
    inputs = [make_activations(case, 40, torch.float32, seed=i) for i, case in enumerate(cases)]
    failures: list[str] = []

    def hammer(i: int) -> None:
        for _ in range(40):
            if not torch.equal(modules[i](inputs[i]), expected[i]):
                failures.append(f"thread {i}")
                return

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        expected = [m(x) for m, x in zip(modules, inputs, strict=True)]
        workers = [threading.Thread(target=hammer, args=(i,)) for i in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        torch.set_num_threads(threads)
    assert not failures


@pytest.mark.parametrize("case", [PARTIAL, PARTIAL_ACT, WIDE], ids=str)
def test_prefill_tiles_match_the_reference_at_every_tile_width(case: LayerCase) -> None:
    """Row counts on each side of each tile-width switch (short, long, whole weight) and partial tiles."""
    module = build(case, **PATHS["tiles"])
    for rows in (1, 24, 100, LONG_FROM - 1, LONG_FROM, 300, WHOLE_WEIGHT_FROM - 1, WHOLE_WEIGHT_FROM):
        assert_matches_reference(module, case, rows)


@pytest.mark.parametrize("rows", [1, LONG_FROM, WHOLE_WEIGHT_FROM, 10**5])
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
    x = make_activations(WIDE, 5, torch.bfloat16)
    ys = [build(WIDE, **PATHS[path])(x) for path in ("decode", "fused", "tiles")]
    assert all(y.dtype == torch.bfloat16 for y in ys)
    weight, bias = make_weight(WIDE), make_bias(WIDE)
    tol = tolerance(x, weight, bias, torch.bfloat16)
    for y in ys:
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


@pytest.mark.parametrize("option", ["dequant_from", "tiles_from"])
@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "16"])
def test_row_switches_must_be_positive_ints(option: str, bad: object) -> None:
    with pytest.raises(KernelInputError, match=option):
        quant_linear_from_weight(make_weight(AWQ), "gemm", backend="cpu_int4", **{option: bad})
