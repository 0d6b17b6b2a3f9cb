"""AWQ time side by side: lowbit and GPT-QModel 7.7.0 on the first layers of SmolLM2-135M, same rows.

The dense SmolLM2 (from its ``.gguf``) is cut to its first ``--layers`` decoder layers and saved as a
Hugging Face directory; ``--rows`` x ``--length`` tokens of the bundled calibration text (the quality
bench's slice) are given to both tools as token ids. Each tool quantizes AWQ g64 asymmetric (the row
"awq g64 asym") in its own subprocess, loaded in ``--dtype`` (GPT-QModel's AWQ refuses float32: bfloat16
is the dtype both can run), with ``--threads`` torch threads and GPT-QModel's disk offload off (compute,
not disk, is compared). lowbit runs twice: with its defaults (``lowbit``) and with the full scale search
(``lowbit-full``: every token replayed, no Gram form; :mod:`awq_search_defaults`). Printed per tool:
process CPU seconds and wall seconds of ``quantize`` alone and of quantize + save (lowbit's save verifies
the checkpoint), peak RSS, and the ratio to GPT-QModel's.

Quality of the same layers: each tool's checkpoint is read back as dense float32 (``qhf.export_dense``,
exactly the stored weights), its ``--layers`` decoder layers are put in place of the full dense model's
first layers (the rest stay dense), and that model's perplexity is scored on the first ``--windows``
512-token windows of the bundled docs' evaluation text (``qhf.perplexity``), beside the dense model's.
Results are cached as JSON under ``--work``; ``--rerun`` recomputes.

Run from the ``bench_quality`` nox session's environment (GPT-QModel installed), with lowbit's packages on
``PYTHONPATH``: ``python benchmarks/bench_awq_vs_reference.py --layers 4``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from smollm2_source import calibration_rows, smollm2_gguf  # noqa: E402

TOOLS = ("lowbit", "lowbit-full", "gptqmodel")  # lowbit-full: search_tokens=None, gram_loss=False


def prepare(work: Path, layers: int, rows: int, length: int) -> dict[str, Any]:
    """The truncated dense model under ``work`` and the calibration rows (cached in ``inputs.json``)."""
    manifest = work / "inputs.json"
    if manifest.exists():
        data = json.loads(manifest.read_text())
        if (data["layers"], data["rows"], data["length"]) == (layers, rows, length) and "full" in data:
            return data
    import qhf
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import encode

    base = qhf.load(smollm2_gguf(), {"method": "rtn"})
    model = base.source.materialize_all()
    full = work / "full"
    shutil.rmtree(full, ignore_errors=True)
    model.save_pretrained(full)
    base.tokenizer.save_pretrained(full)
    model.model.layers = model.model.layers[:layers]
    model.config.num_hidden_layers = layers
    dense = work / "dense"
    shutil.rmtree(dense, ignore_errors=True)
    model.save_pretrained(dense)
    base.tokenizer.save_pretrained(dense)
    data = {
        "layers": layers,
        "rows": rows,
        "length": length,
        "dense": str(dense),
        "full": str(full),
        "evaluation": encode(base.tokenizer, bundled_docs("evaluation").joined()),
        "calibration": calibration_rows(base.tokenizer, rows, length),
    }
    work.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps(data))
    return data


def run_lowbit(inputs: dict[str, Any], dtype: Any, out: Path, full_search: bool = False) -> float:
    """Quantize with lowbit (its defaults, or the full scale search); returns the CPU seconds of ``quantize``
    alone (save timed by the caller)."""
    import contextlib

    import qhf
    from awq_search_defaults import processor_defaults

    settings = {"method": "awq", "bits": 4, "group_size": 64, "sym": False}
    qm = qhf.load(inputs["dense"], settings, dtype=dtype)
    cpu = time.process_time()
    with processor_defaults(None, False) if full_search else contextlib.nullcontext():
        qm.quantize(calibration=inputs["calibration"])
    cpu = time.process_time() - cpu
    qm.save(out)
    return cpu


def run_reference(inputs: dict[str, Any], dtype: Any, out: Path) -> float:
    """Quantize with GPT-QModel 7.7.0; returns the CPU seconds of ``quantize`` alone."""
    from gptqmodel import GPTQModel, QuantizeConfig
    from transformers import AutoTokenizer

    config = QuantizeConfig(bits=4, method="awq", format="gemm", group_size=64, sym=False, offload_to_disk=False)
    model = GPTQModel.load(inputs["dense"], config, device="cpu", dtype=dtype)
    rows = [{"input_ids": r, "attention_mask": [1] * len(r)} for r in inputs["calibration"]]
    cpu = time.process_time()
    model.quantize(rows, tokenizer=AutoTokenizer.from_pretrained(inputs["dense"]), batch_size=1)
    cpu = time.process_time() - cpu
    model.save(str(out))
    return cpu


def spliced_perplexity(inputs: dict[str, Any], checkpoint: Path | None, windows: int) -> float:
    """Perplexity of the full dense model with its first layers taken from ``checkpoint`` (dense if None)."""
    import torch
    from qhf.export import export_dense
    from qhf.perplexity import perplexity
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(inputs["full"], dtype=torch.float32).eval()
    if checkpoint is not None:
        exported = checkpoint.with_name(checkpoint.name + "-dense")
        shutil.rmtree(exported, ignore_errors=True)
        export_dense(checkpoint, exported, dtype=torch.float32)
        state = {}
        for shard in sorted(exported.glob("*.safetensors")):
            state.update({k: v for k, v in load_file(shard).items() if k.startswith("model.layers.")})
        if len({k.split(".")[2] for k in state}) != inputs["layers"]:
            raise SystemExit(f"{checkpoint}: expected {inputs['layers']} decoder layers in the export")
        missing = [k for k in state if k not in model.state_dict()]
        if missing:
            raise SystemExit(f"{checkpoint}: export tensors the full model lacks: {missing[:3]}")
        model.load_state_dict(state, strict=False)
        shutil.rmtree(exported, ignore_errors=True)
    ids = inputs["evaluation"]
    return round(perplexity(model, ids, window=512, max_windows=windows).perplexity, 3)


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    inputs = json.loads((args.work / "inputs.json").read_text())
    out = args.work / "checkpoints" / args.worker
    shutil.rmtree(out, ignore_errors=True)
    dtype = getattr(torch, args.dtype)
    wall, cpu = time.perf_counter(), time.process_time()
    if args.worker == "gptqmodel":
        quantize_cpu = run_reference(inputs, dtype, out)
    else:
        quantize_cpu = run_lowbit(inputs, dtype, out, full_search=args.worker == "lowbit-full")
    result = {
        "quantize_cpu_s": round(quantize_cpu, 1),
        "total_cpu_s": round(time.process_time() - cpu, 1),
        "total_wall_s": round(time.perf_counter() - wall, 1),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "dtype": args.dtype,
        "threads": args.threads,
        "load_at_end": round(os.getloadavg()[0], 1),
        "ppl": spliced_perplexity(inputs, out, args.windows),
    }
    (args.work / f"{args.worker}_{args.dtype}.json").write_text(json.dumps(result))


def print_table(work: Path, dtype: str, inputs: dict[str, Any]) -> None:
    results = {t: json.loads(p.read_text()) for t in TOOLS if (p := work / f"{t}_{dtype}.json").exists()}
    dense = json.loads(p.read_text())["ppl"] if (p := work / "dense.json").exists() else None
    print(
        f"\nSmolLM2-135M first {inputs['layers']} layers, AWQ g64 asym, {inputs['rows']}x{inputs['length']} tokens, "
        f"{dtype}; process CPU s (ratio to GPT-QModel); perplexity with those layers in the full model "
        f"(dense: {dense})"
    )
    header = f"{'tool':<10} {'quantize cpu s':>16} {'+ save cpu s':>16} {'+ save wall s':>14} {'peak GiB':>9}"
    print(f"{header} {'load':>5} {'ppl':>8}")
    ref = results.get("gptqmodel")
    for tool, r in results.items():
        ratio = f" ({r['quantize_cpu_s'] / ref['quantize_cpu_s']:.2f})" if ref else ""
        total = f" ({r['total_cpu_s'] / ref['total_cpu_s']:.2f})" if ref else ""
        print(
            f"{tool:<10} {str(r['quantize_cpu_s']) + ratio:>16} {str(r['total_cpu_s']) + total:>16} "
            f"{r['total_wall_s']:>14} {r['peak_rss_gib']:>9} {r['load_at_end']:>5} {r.get('ppl', '-'):>8}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("bench-results/awq_vs_reference"))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--rows", type=int, default=128)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--windows", type=int, default=8, help="512-token windows of the evaluation text")
    parser.add_argument("--rerun", action="store_true")
    parser.add_argument("--worker", choices=TOOLS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    inputs = prepare(args.work, args.layers, args.rows, args.length)
    if not (args.work / "dense.json").exists() or args.rerun:
        (args.work / "dense.json").write_text(json.dumps({"ppl": spliced_perplexity(inputs, None, args.windows)}))
    for tool in args.tools.split(","):
        if (args.work / f"{tool}_{args.dtype}.json").exists() and not args.rerun:
            continue
        print(f"running {tool}", flush=True)
        # GPT-QModel 7.7.0's loader pool refuses fewer than 2 CPU workers; torch runs --threads threads
        env = {**os.environ, "GPTQMODEL_CPU_WORKERS": str(max(2, args.threads)), "OMP_NUM_THREADS": str(args.threads)}
        command = [sys.executable, __file__, "--work", str(args.work), "--dtype", args.dtype]
        command += ["--windows", str(args.windows)]
        command += ["--threads", str(args.threads), "--worker", tool]
        if subprocess.run(command, env=env, check=False).returncode != 0:
            print(f"{tool}: failed", flush=True)
    print_table(args.work, args.dtype, inputs)


if __name__ == "__main__":
    main()
