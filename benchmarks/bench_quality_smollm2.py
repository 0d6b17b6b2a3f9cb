"""Quality side by side: lowbit and GPT-QModel 7.7.0 on SmolLM2-135M, same source, rows and evaluator.

Protocol (issue 17):

* source: SmolLM2-135M-Instruct decoded from its ``.gguf`` to a dense float32 Hugging Face directory;
* calibration: the bundled docs' even documents (``qhf.corpus.bundled_docs("calibration")``: sorted keys,
  joined with blank lines), first ``rows * length`` tokens cut into ``rows`` consecutive rows
  (default 128 x 256), given to both tools as token ids;
* evaluation: perplexity over non-overlapping 512-token windows (tokens 1..511 of each scored), the first
  ``--windows`` windows of the bundled docs' odd documents (in-domain) and of Jane Austen's *Persuasion*
  (out-of-domain; Debian's ``r-cran-janeaustenr``, see ``austen_text.py``).

Both tools' checkpoints are read by the same code (``qhf.export_dense`` in float32: exactly the weights
each checkpoint stores) and scored by the same ``qhf.perplexity`` on the same transformers model, so a
difference is a difference in what was quantized, never in the evaluator. Every (tool, row) pair runs in a
fresh subprocess of this script (``--worker``) so its wall time, CPU time and peak resident memory are its
own; results are cached as JSON under ``--work`` and a table is printed from whatever is there.

GPT-QModel must be importable (the ``bench_quality`` nox session installs it as the interop session does);
rows it cannot run are marked. Computation is float32 for both tools, ``--threads`` torch threads each,
except AWQ: GPT-QModel 7.7.0's AWQ refuses float32 models and runs in bfloat16, so the lowbit row
"awq g64 asym bf16" loads the model in bfloat16 too (the same compute dtype; each result records its
``compute_dtype``). On a CPU with AMX, bfloat16 GEMMs are several times faster than float32; on an
AVX2-only CPU they are emulated and slower.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from austen_text import DEBIAN_AUSTEN, austen_book  # noqa: E402
from smollm2_source import calibration_rows, smollm2_gguf  # noqa: E402

# row -> (lowbit settings, reference QuantizeConfig keyword arguments or None when the reference has no such row)
ROWS: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {
    "rtn g64 sym": ({"method": "rtn", "bits": 4, "group_size": 64, "sym": True}, {"method": "rtn", "group_size": 64}),
    "gptq g128 sym": ({"method": "gptq", "bits": 4, "group_size": 128, "sym": True}, {"group_size": 128}),
    "gptq g64 sym": ({"method": "gptq", "bits": 4, "group_size": 64, "sym": True}, {"group_size": 64}),
    "gptq g64 asym": (
        {"method": "gptq", "bits": 4, "group_size": 64, "sym": False},
        {"group_size": 64, "sym": False},
    ),
    "gptq g128 desc_act": (
        {"method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": True},
        {"group_size": 128, "desc_act": True},
    ),
    "awq g64 asym": (
        {"method": "awq", "bits": 4, "group_size": 64, "sym": False},
        {"method": "awq", "format": "gemm", "group_size": 64, "sym": False},
    ),
    "awq g64 asym bf16": (  # GPT-QModel's AWQ runs in bfloat16 in any case: its row is "awq g64 asym"
        {"method": "awq", "bits": 4, "group_size": 64, "sym": False, "dtype": "bfloat16"},
        None,
    ),
    "gptaq g128 sym": (
        {"method": "gptq", "bits": 4, "group_size": 128, "sym": True, "gptaq": {"alpha": 0.25}},
        {"group_size": 128, "gptaq": {"alpha": 0.25, "device": "cpu"}},
    ),
    "foem g128 sym": (
        {"method": "gptq", "bits": 4, "group_size": 128, "sym": True, "foem": {"alpha": 0.0, "beta": 0.2}},
        {"group_size": 128, "foem": {"alpha": 0.0, "beta": 0.2, "device": "cpu"}},
    ),
    "gptq pc sym": ({"method": "gptq", "bits": 4, "group_size": -1, "sym": True}, {"group_size": -1}),
    "qqq pc sym": (  # QQQ needs in % 128 == 0 for group 128; SmolLM2's hidden 576 is not: per channel
        {"method": "qqq", "bits": 4, "group_size": -1},
        {"method": "qqq", "format": "qqq", "group_size": -1},
    ),
    "gptq g128 sym + eora r32": (  # the reference's EoRA run needs an adapter path API: lowbit's row only
        {"method": "gptq", "bits": 4, "group_size": 128, "sym": True, "adapter": {"rank": 32}},
        None,
    ),
    "paroquant g64": (  # lowbit's default budget (2 + 1 epochs, 512 rows); the reference's 10 + 10 is hours on CPU
        {"method": "paroquant", "bits": 4, "group_size": 64, "sym": True},
        None,
    ),
    "best g128 sym": ({"preset": "best", "bits": 4, "group_size": 128, "sym": True}, None),
    "best g64 asym": ({"preset": "best", "bits": 4, "group_size": 64, "sym": False}, None),
}
TOOLS = ("lowbit", "gptqmodel")


def result_name(tool: str, row: str) -> str:
    """The file stem of one (tool, row) result and checkpoint: ``lowbit__gptq_g128_sym``."""
    return f"{tool}__{row.replace(' ', '_')}"


def prepare(work: Path, rows: int, length: int, austen: Path) -> dict[str, Any]:
    """Dense HF directory, calibration rows and evaluation token ids under ``work`` (made once)."""
    manifest = work / "inputs.json"
    if manifest.exists():
        data: dict[str, Any] = json.loads(manifest.read_text())
        if data["rows"] == rows and data["length"] == length:
            return data
    import qhf
    from qhf.corpus import bundled_docs, corpus_identity
    from qhf.tokenizer import encode

    base = qhf.load(smollm2_gguf(), {"method": "rtn"})
    dense_dir = work / "dense"
    model = base.source.materialize_all()
    model.save_pretrained(dense_dir)
    base.tokenizer.save_pretrained(dense_dir)
    data = {
        "rows": rows,
        "length": length,
        "calibration": calibration_rows(base.tokenizer, rows, length),
        "texts": {
            "docs": encode(base.tokenizer, bundled_docs("evaluation").joined()),
            "austen": encode(base.tokenizer, austen_book(austen, "persuasion")),
        },
        "corpus": corpus_identity(),
        "dense": str(dense_dir),
    }
    manifest.write_text(json.dumps(data))
    return data


def quantize_lowbit(inputs: dict[str, Any], settings: dict[str, Any], out: Path) -> dict[str, Any]:
    import qhf
    import torch
    from qhf.presets import apply_preset

    settings = dict(settings)
    preset = settings.pop("preset", None)
    dtype = getattr(torch, settings.pop("dtype", "float32"))  # the compute dtype the model is loaded in
    if preset is not None:
        settings = apply_preset(preset, settings)
    qm = qhf.load(inputs["dense"], settings, dtype=dtype)
    summary = qm.quantize(calibration=inputs["calibration"] if settings.get("method") != "rtn" else None)
    qm.save(out)
    return {"quantize_seconds": summary.quantize_seconds, "compute_dtype": str(dtype).removeprefix("torch.")}


def quantize_reference(inputs: dict[str, Any], kwargs: dict[str, Any], out: Path) -> dict[str, Any]:
    import torch
    from gptqmodel import GPTQModel, QuantizeConfig
    from transformers import AutoTokenizer

    if kwargs.get("method") == "rtn":  # the reference's RTN is its own config class (weight-only, no Hessian)
        from gptqmodel.quantization.config import RTNConfig

        config = RTNConfig(bits=4, **{k: v for k, v in kwargs.items() if k != "method"})
    else:
        config = QuantizeConfig(bits=4, **kwargs)
    # GPT-QModel 7.7.0's AWQ packer (AwqTorchLinear) refuses float32 models: its AWQ rows load in bfloat16
    dtype = torch.bfloat16 if kwargs.get("method") == "awq" else torch.float32
    model = GPTQModel.load(inputs["dense"], config, device="cpu", dtype=dtype)
    rows = [{"input_ids": r, "attention_mask": [1] * len(r)} for r in inputs["calibration"]]
    start = time.perf_counter()
    model.quantize(rows, tokenizer=AutoTokenizer.from_pretrained(inputs["dense"]), batch_size=1)
    seconds = time.perf_counter() - start
    model.save(str(out))
    return {"quantize_seconds": round(seconds, 1), "compute_dtype": str(dtype).removeprefix("torch.")}


def evaluate(checkpoint: Path | None, inputs: dict[str, Any], windows: dict[str, int]) -> dict[str, float]:
    """Perplexity of a checkpoint's stored weights (dense float32 export) or of the dense source (None)."""
    import torch
    from qhf.export import export_dense
    from qhf.perplexity import perplexity
    from transformers import AutoModelForCausalLM

    target = Path(inputs["dense"])
    if checkpoint is not None:
        target = checkpoint.with_name(checkpoint.name + "-dense")
        shutil.rmtree(target, ignore_errors=True)
        export_dense(checkpoint, target, dtype=torch.float32)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch.float32).eval()
    out = {
        name: round(perplexity(model, ids, window=512, max_windows=windows[name]).perplexity, 3)
        for name, ids in inputs["texts"].items()
    }
    if checkpoint is not None:
        shutil.rmtree(target, ignore_errors=True)
    return out


def worker(args: argparse.Namespace) -> None:
    """One (tool, row) in this process: quantize, save, evaluate; write the JSON result."""
    import torch

    torch.set_num_threads(args.threads)
    inputs = json.loads((args.work / "inputs.json").read_text())
    tool, row = args.worker
    windows = {"docs": args.windows, "austen": args.austen_windows}
    result_path = args.work / f"{result_name(tool, row)}.json"
    if row == "dense":
        start = time.perf_counter()
        result: dict[str, Any] = {"ppl": evaluate(None, inputs, windows), "eval_seconds": time.perf_counter() - start}
        result_path.write_text(json.dumps(result))
        return
    settings, reference = ROWS[row]
    out = args.work / "checkpoints" / result_name(tool, row)
    shutil.rmtree(out, ignore_errors=True)
    start, cpu0 = time.perf_counter(), time.process_time()
    if tool == "lowbit":
        result = quantize_lowbit(inputs, settings, out)
    else:
        if reference is None:
            raise SystemExit(f"{row}: GPT-QModel has no such row")
        result = quantize_reference(inputs, reference, out)
    result["total_seconds"] = round(time.perf_counter() - start, 1)
    result["cpu_seconds"] = round(time.process_time() - cpu0, 1)
    result["peak_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)
    result["ppl"] = evaluate(out, inputs, windows)
    result_path.write_text(json.dumps(result))


def _cell(ppl: dict[str, float], dense: dict[str, float] | None, text: str) -> str:
    """``12.34 (1.056)``: perplexity and its ratio to the dense model's on the same text."""
    return f"{ppl[text]:.2f}" + (f" ({ppl[text] / dense[text]:.3f})" if dense else "")


def print_table(work: Path) -> None:
    def load(tool: str, row: str) -> dict[str, Any] | None:
        path = work / f"{result_name(tool, row)}.json"
        return json.loads(path.read_text()) if path.exists() else None

    dense = load("dense", "dense")
    print(
        f"\nSmolLM2-135M, 4-bit, Python {platform.python_version()}; "
        "perplexity (x dense), quantize wall s, peak RSS GiB"
    )
    header = f"{'row':<20}" + "".join(f" | {t + ' docs':>16} {t + ' austen':>18} {'s':>6} {'GiB':>5}" for t in TOOLS)
    print(header)
    if dense:
        print(f"{'dense':<20} | {dense['ppl']['docs']:>16.3f} {dense['ppl']['austen']:>18.3f}")
    for row in ROWS:
        cells = []
        for tool in TOOLS:
            r = load(tool, row)
            if r is None:
                cells.append(f" | {'-':>16} {'-':>18} {'-':>6} {'-':>5}")
                continue
            docs, aus = (_cell(r["ppl"], dense["ppl"] if dense else None, k) for k in ("docs", "austen"))
            cells.append(f" | {docs:>16} {aus:>18} {r['quantize_seconds'] or 0:>6.0f} {r['peak_rss_gib']:>5.2f}")
        print(f"{row:<20}" + "".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("bench-results/quality_smollm2"), help="cache folder")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows (see ROWS)")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--calibration-rows", type=int, default=128)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--windows", type=int, default=32, help="512-token windows of the in-domain text")
    parser.add_argument("--austen-windows", type=int, default=16, help="512-token windows of the out-of-domain text")
    parser.add_argument(
        "--lowbit-row",
        action="append",
        default=[],
        metavar="NAME=JSON",
        help="an extra lowbit-only row: its name and its settings as JSON (repeatable)",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--austen", type=Path, default=DEBIAN_AUSTEN)
    parser.add_argument("--rerun", action="store_true", help="recompute rows already cached")
    parser.add_argument("--table", action="store_true", help="only print the table of cached results")
    parser.add_argument("--worker", nargs=2, metavar=("TOOL", "ROW"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.work = args.work.resolve()
    for extra in args.lowbit_row:
        name, _, settings = extra.partition("=")
        try:
            ROWS[name] = (json.loads(settings), None)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"--lowbit-row {extra!r}: expected NAME=JSON settings ({exc})") from None
    if args.worker:
        worker(args)
        return
    if args.table:
        print_table(args.work)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    prepare(args.work, args.calibration_rows, args.length, args.austen)
    jobs = [("dense", "dense")] + [(t, r) for r in args.rows.split(",") for t in args.tools.split(",")]
    for tool, row in jobs:
        if row != "dense" and row not in ROWS:
            raise SystemExit(f"--rows: unknown row {row!r}; known: {', '.join(ROWS)}")
        if tool == "gptqmodel" and row in ROWS and ROWS[row][1] is None:
            continue
        path = args.work / f"{result_name(tool, row)}.json"
        if path.exists() and not args.rerun:
            continue
        print(f"running {tool} / {row}", flush=True)
        # GPT-QModel 7.7.0's loader pool asks for 2 CPU workers and refuses fewer; torch itself still runs
        # ``--threads`` threads (``torch.set_num_threads`` in the worker), so compute is the same for both tools
        workers = max(2, args.threads)
        env = {**os.environ, "GPTQMODEL_CPU_WORKERS": str(workers), "OMP_NUM_THREADS": str(args.threads)}
        command = [sys.executable, __file__, "--work", str(args.work), "--windows", str(args.windows)]
        command += ["--austen-windows", str(args.austen_windows), "--threads", str(args.threads)]
        command += [a for extra in args.lowbit_row for a in ("--lowbit-row", extra)] + ["--worker", tool, row]
        code = subprocess.run(command, env=env, check=False).returncode
        if code != 0:
            print(f"{tool} / {row}: failed with exit code {code}", flush=True)
    print_table(args.work)


if __name__ == "__main__":
    main()
