"""``lowbit bench``: time qkernels' quantized linears on this machine, and say which backend AUTO picks and why.

A random ``[out, in]`` float32 weight is quantized by round-to-nearest (``qalgos.quantize_rtn``) and built
with ``qkernels.quant_linear_from_weight`` once with the requested backend (AUTO by default: the selection
and its explanation are printed) and once per other registered backend that accepts it on the CPU.
Each module is timed over ``--repeat`` calls per activation row count, next to a dense ``F.linear`` with the
dequantized weight measured in the same run; ratios are against that dense baseline.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from .report_tables import render_table

SEED = 0


def _time_call(fn: Any, x: Any, repeat: int) -> float:
    """Median seconds of ``fn(x)`` over ``repeat`` calls, after two warm-up calls."""
    import torch

    with torch.no_grad():
        fn(x)
        fn(x)
        samples = []
        for _ in range(repeat):
            start = time.perf_counter()
            fn(x)
            samples.append(time.perf_counter() - start)
    samples.sort()
    return samples[len(samples) // 2]


def _build_all(weight: Any, fmt: str, requested: str) -> tuple[Any, dict[str, Any], dict[str, str]]:
    """(selected module, {backend: module}, {backend: why not built})."""
    from qkernels import AUTO, quant_linear_from_weight, registered_backends
    from qkernels.errors import BackendRefusedError, UnsupportedContractError

    selected = quant_linear_from_weight(weight, fmt, backend=requested)
    chosen = str(getattr(getattr(selected, "selection", None), "backend", requested))
    built: dict[str, Any] = {chosen: selected}
    skipped: dict[str, str] = {}
    if requested != AUTO:
        return selected, built, skipped
    for name in registered_backends():
        if name in built:
            continue
        try:
            built[name] = quant_linear_from_weight(weight, fmt, backend=name)
        except (BackendRefusedError, UnsupportedContractError) as exc:
            skipped[name] = str(exc).splitlines()[0]
    return selected, built, skipped


def run(args: argparse.Namespace) -> int:
    import torch
    from qalgos import QuantSpec, quantize_rtn

    generator = torch.Generator().manual_seed(SEED)
    dense = torch.randn(args.out_features, args.in_features, generator=generator) * 0.02
    spec = QuantSpec(bits=args.bits, group_size=args.group_size, sym=True)
    weight = quantize_rtn(dense, spec).weight
    selected, built, skipped = _build_all(weight, args.format, args.backend)
    reference = torch.from_numpy(weight.dequantize())
    rows = []
    results: list[dict[str, Any]] = []
    for tokens in args.tokens:
        x = torch.randn(tokens, args.in_features, generator=generator)
        base = _time_call(lambda v: torch.nn.functional.linear(v, reference), x, args.repeat)
        rows.append(["dense F.linear (baseline)", tokens, base * 1e3, 1.0, "-"])
        results.append({"backend": "dense", "tokens": tokens, "ms": base * 1e3})
        for name, module in built.items():
            seconds = _time_call(module, x, args.repeat)
            with torch.no_grad():
                error = float((module(x) - torch.nn.functional.linear(x, reference)).abs().max())
            rows.append([name, tokens, seconds * 1e3, seconds / base, f"{error:.2e}"])
            results.append({"backend": name, "tokens": tokens, "ms": seconds * 1e3, "max_abs_diff": error})
    selection = getattr(selected, "selection", None)
    explanation = selection.explain() if selection is not None else f"backend {args.backend} (explicit)"
    shape = f"{args.format} {args.bits}-bit g{args.group_size} [{args.out_features} x {args.in_features}]"
    if args.json:
        print(json.dumps({"shape": shape, "selection": explanation, "results": results, "skipped": skipped}, indent=2))
        return 0
    print(f"weight       {shape}, float32 activations, {torch.get_num_threads()} torch threads")
    print(f"selection    {explanation}")
    print(render_table(("backend", "tokens", "ms/call", "x dense", "max |diff| vs dense"), rows))
    for name, reason in skipped.items():
        print(f"not built    {name}: {reason}")
    return 0
