"""What the default calibration costs before and after the generation budget and the cache, against quantizing.

For one model (a llama ``.gguf`` or a Hugging Face directory), in one process, same threads:

* ``before``: the default mixture as it was (``samples`` documentation + ``samples`` generated rows, no
  budget, no cache): ``DefaultCalibration(generation_share=None, cache=False)``, built alone (seconds);
* ``after, cold``: the default now (budget, empty cache): built by ``QuantModel.quantize`` (GPTQ 4-bit),
  whose ``calibration_seconds`` and ``quantize_seconds`` are reported; the row count is the same as before,
  so the quantization's time stands for both;
* ``after, cache hit``: the default built again (the rows read from the cache).

The cache lives in a temporary directory (``LOWBIT_CACHE_DIR``). Prints a table row and writes JSON with
``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import qhf
import torch
from qhf.calibration import DefaultCalibration, default_calibration
from qhf.calibration.source_default import size_of


def _build(path: str, config: DefaultCalibration, samples: int, length: int) -> tuple[float, dict]:
    qm = qhf.load(path, {"method": "gptq", "bits": 4, "group_size": 128})
    start = time.perf_counter()
    resolved, budget = config.budgeted(samples, length, size_of(qm.source))
    mixed = default_calibration(qm.source, qm.tokenizer, resolved, budget=budget, progress=True)
    return time.perf_counter() - start, {**mixed.meta, "cache": mixed.cache}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a llama .gguf or a Hugging Face model directory")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["LOWBIT_CACHE_DIR"] = cache
        before, before_meta = _build(
            args.model, DefaultCalibration(generation_share=None, cache=False), args.samples, args.length
        )
        qm = qhf.load(args.model, {"method": "gptq", "bits": 4, "group_size": 128})
        summary = qm.quantize(samples=args.samples, length=args.length, progress=True)
        del qm
        hit, hit_meta = _build(args.model, DefaultCalibration(), args.samples, args.length)
    source = dict(summary.calibration_source or {})
    after = float(summary.calibration_seconds or 0.0)
    result = {
        "model": args.model,
        "rows": f"{args.samples}+{args.samples} x {args.length}",
        "generated_before": before_meta["self_generated_rows"],
        "generated_after": source.get("self_generated_rows"),
        "calibration_before_s": round(before, 1),
        "calibration_after_s": round(after, 1),
        "quantize_s": round(summary.quantize_seconds, 1),
        "before_over_quantize": round(before / summary.quantize_seconds, 3),
        "after_over_quantize": round(after / summary.quantize_seconds, 3),
        "cache_hit_s": round(hit, 2),
        "cache_hit": hit_meta["cache"],
        "same_rows_on_hit": hit_meta["tokens_sha256"] == source.get("tokens_sha256"),
        "threads": args.threads,
    }
    print(json.dumps(result, indent=1))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
