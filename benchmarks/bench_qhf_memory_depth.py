"""Peak memory against depth: the in-memory path (``keep_in_memory=True``) against streaming (``False``).

Writes random-weight float16 safetensors Llama models (hidden 1024, MLP 3584, 8 heads / 4 key-value heads,
vocabulary 8192; 4 and 16 decoder layers by default) to a temporary directory, then runs each
(layers, path) in its own subprocess: ``qhf.load`` (float32 compute) + GPTQ 4-bit g128 ``quantize`` with fixed
token-id calibration (16 rows x 256 random ids, so nothing is generated) + ``save(verify=True)``. The child
reports its peak resident set (``VmHWM``, :mod:`peak_memory`) after quantize and after save+verify; the table
gives both and their ratio to the 4-layer run of the same path, and whether the two paths' weight files are
byte-identical. The CPU (``/proc/cpuinfo`` model name, avx512f / amx_tile flags) heads the table. Nothing is asserted.

    python benchmarks/bench_qhf_memory_depth.py [--layers 4 16] [--work DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_info import cpu_line
from peak_memory import peak_rss_bytes

HIDDEN, MLP, HEADS, KV_HEADS, VOCAB = 1024, 3584, 8, 4, 8192
ROWS, LENGTH = 16, 256
GIB = 2**30
PATHS = {"memory": True, "streaming": False}


def write_model(directory: Path, layers: int) -> Path:
    """A random float16 Llama of ``layers`` decoder layers, with a small word-level tokenizer."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=MLP,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=2 * LENGTH,
        tie_word_embeddings=False,
    )
    torch.manual_seed(layers)
    model = LlamaForCausalLM(config).to(torch.float16)
    model.save_pretrained(directory)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(directory)
    return directory


def child(source: Path, path: str, out: Path) -> None:
    """Quantize and save ``source`` on ``path`` (memory | streaming); print the peaks as one JSON line."""
    import qhf
    import torch

    torch.manual_seed(0)
    rows = torch.randint(3, VOCAB, (ROWS, LENGTH)).tolist()
    qm = qhf.load(source, {"method": "gptq", "bits": 4, "group_size": 128})
    summary = qm.quantize(rows, keep_in_memory=PATHS[path], spill_dir=out.parent)
    after_quantize = peak_rss_bytes()
    saved = qm.save(out)
    after_save = peak_rss_bytes()
    shards = sorted(p for p in out.iterdir() if p.suffix == ".safetensors" or p.name.endswith(".index.json"))
    digest = hashlib.sha256(b"".join(hashlib.sha256(p.read_bytes()).digest() for p in shards)).hexdigest()
    report = {
        "quantize_peak": after_quantize,
        "peak": after_save,
        "quantize_seconds": summary.quantize_seconds,
        "verified": bool(saved.verification and saved.verification["passed"]),
        "weights_sha256": digest,
    }
    print(json.dumps(report))


def run_child(source: Path, path: str, out: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(source), path, str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{path} on {source.name} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def table(results: dict[tuple[int, str], dict[str, Any]], layers: list[int]) -> str:
    lines = [
        f"CPU: {cpu_line()}; hidden {HIDDEN}, MLP {MLP}, float16 files, float32 compute, GPTQ 4-bit g128, "
        f"{ROWS} x {LENGTH} calibration ids",
        "",
        "| layers | path | peak RSS quantize (GiB) | peak RSS quantize+save+verify (GiB) | ratio vs "
        f"{layers[0]} layers | quantize s | verified |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for path in PATHS:
        base = results[(layers[0], path)]["peak"]
        for count in layers:
            r = results[(count, path)]
            lines.append(
                f"| {count} | {path} | {r['quantize_peak'] / GIB:.2f} | {r['peak'] / GIB:.2f} | "
                f"{r['peak'] / base:.2f}x | {r['quantize_seconds']:.0f} | {r['verified']} |"
            )
    same = all(results[(c, "memory")]["weights_sha256"] == results[(c, "streaming")]["weights_sha256"] for c in layers)
    lines += ["", f"weight files byte-identical between the paths: {'yes' if same else 'NO'}"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--work", type=Path, default=None, help="where models and outputs go (default: a temp dir)")
    parser.add_argument("--child", nargs=3, metavar=("SOURCE", "PATH", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1], Path(args.child[2]))
        return
    with tempfile.TemporaryDirectory(prefix="bench-memory-depth-", dir=args.work) as tmp:
        work = Path(tmp)
        results: dict[tuple[int, str], dict[str, Any]] = {}
        for count in args.layers:
            source = write_model(work / f"llama-{count}", count)
            for path in PATHS:
                results[(count, path)] = run_child(source, path, work / f"out-{count}-{path}")
                print(f"{count} layers, {path}: {json.dumps(results[(count, path)])}", flush=True)
        print(table(results, args.layers))


if __name__ == "__main__":
    main()
