"""GPU check of the qkernels Triton int4 backends: correctness against the torch reference, and timings.

Self-contained (random weights, no downloads); needs a CUDA device, triton, and qkernels/qformats installed
(``pip install -e packages/qformats -e 'packages/qkernels[triton]'``). Runs in well under 3 minutes.
For each case it builds the module on ``cuda`` through ``quant_linear`` with an explicit backend, runs
it against the float32 dequantized reference, and prints the max abs error, the worst ratio of error to
the dtype-derived tolerance (must be <= 1), and microseconds per call beside a dense ``F.linear`` of the
same dtype and the torch reference backend. Exit status 1 if any case exceeds its tolerance.

Run: ``python benchmarks/gpu_check_qkernels.py [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
    sys.exit("unset TRITON_INTERPRET: this script checks the compiled GPU kernels")

from qkernels import quant_linear_from_weight, select
from qkernels.checkpoint import load_checkpoint, pack_weight
from qkernels.testing.cases import TOLERANCE_EPS, LayerCase, make_activations, make_bias, make_weight


def cuda_time_us(fn, iters: int = 50) -> float:  # type: ignore[no-untyped-def]
    """Mean microseconds per call over ``iters`` calls after warm-up, timed with CUDA events."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / iters


def main() -> int:
    parser = argparse.ArgumentParser(description="qkernels Triton GPU check")
    parser.add_argument("--quick", action="store_true", help="one size, fewer batches")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to check")
        return 2
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}")
    sizes = [(4096, 4096)] if args.quick else [(4096, 4096), (11008, 4096)]
    cases = []
    for out, in_ in sizes:
        cases += [
            (LayerCase("gptq_v2", 4, 128, False, out, in_, bias=True), "triton_gptq"),
            (LayerCase("gptq_v2", 4, 128, True, out, in_, act_order=True), "triton_gptq"),
            (LayerCase("gptq", 4, 32, True, out, in_), "triton_gptq"),
            (LayerCase("gemm", 4, 128, False, out, in_, bias=True), "triton_awq"),
        ]
    batches = (1, 16) if args.quick else (1, 16, 128)
    dtypes = (torch.float16, torch.bfloat16, torch.float32)
    failures = 0
    header = f"{'case':<36} {'backend':<12} {'dtype':<9} {'batch':>5} {'max_err':>10} {'err/tol':>8}"
    print(header + f" {'triton_us':>10} {'dense_us':>9} {'torchref_us':>11}")
    started = time.time()
    for case, backend in cases:
        weight = make_weight(case, seed=1)
        tensors, meta = pack_weight(weight, case.fmt, bias=make_bias(case))
        contract = load_checkpoint(case.fmt, tensors, meta).contract
        print(f"# AUTO on cuda: {select(contract, 'cuda', torch.float16).backend}")
        bias_np = tensors.get("bias")
        dense32 = torch.from_numpy(weight.dequantize()).cuda()
        bias_t = None if bias_np is None else torch.from_numpy(bias_np).cuda()
        # Reference and tolerance in float64 on the GPU (same formulas as qkernels.testing.cases).
        g_idx = torch.from_numpy(weight.g_idx.astype("int64")).cuda()
        bound_w = torch.from_numpy(weight.scales.astype("float64")).cuda()[g_idx].T * float(1 << weight.bits)
        bias64 = None if bias_t is None else bias_t.double()
        for dtype in dtypes:
            module = quant_linear_from_weight(
                weight, case.fmt, bias=bias_np, backend=backend, device="cuda", dtype=dtype
            )  # fmt: skip
            ref_module = quant_linear_from_weight(
                weight, case.fmt, bias=bias_np, backend="torch", device="cuda", dtype=dtype, cache_dense=True
            )  # fmt: skip
            dense = dense32.to(dtype)
            for batch in batches:
                xc = make_activations(case, batch, dtype).cuda()
                ref = xc.double() @ dense32.double().T
                bound = xc.double().abs() @ bound_w.T
                if bias64 is not None:
                    ref, bound = ref + bias64, bound + bias64.abs()
                tol = 4.0 * TOLERANCE_EPS[dtype] * (bound + ref.abs())
                err = (module(xc).double() - ref).abs()
                ratio = float((err / tol).max())
                failures += ratio > 1.0
                b = None if bias_t is None else bias_t.to(dtype)
                t_triton = cuda_time_us(lambda m=module, xc=xc: m(xc))
                t_dense = cuda_time_us(lambda d=dense, xc=xc, b=b: torch.nn.functional.linear(xc, d, b))
                t_ref = cuda_time_us(lambda m=ref_module, xc=xc: m(xc))
                print(
                    f"{case!s:<36} {backend:<12} {str(dtype)[6:]:<9} {batch:>5} {float(err.max()):>10.3g} "
                    f"{ratio:>8.3f} {t_triton:>10.1f} {t_dense:>9.1f} {t_ref:>11.1f}"
                )
            del module, ref_module
    print(f"done in {time.time() - started:.0f} s; {failures} case(s) over tolerance")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
