"""End-to-end qhf: GPTQ 4-bit g128 on a Llama built from a config, then reload and generate.

Default shape (the issue's): hidden 2048, intermediate 5632, 4 layers, vocab 32000, calibration 32 x 256
tokens. Each phase runs in its own subprocess so its peak RSS is its own (``ru_maxrss``). Baselines
measured side by side in this run: one dense forward over the same calibration tokens (the FLOP floor
of any calibration pass), the dense checkpoint size on disk (what loading it whole would cost), dense
greedy generation speed and, with ``--per-group``, the same quantization with per-group capture forwards
instead of lockstep forwards. Peer figures from the issue (same-class machine, not this run) are printed for
orientation only. Nothing is asserted.

    python benchmarks/bench_qhf_end_to_end.py [--hidden 2048 --layers 4 --samples 32 --length 256]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEERS = {"llm-compressor quantize s": 86.6, "GPT-QModel quantize s": 123.0, "peer peak GiB": 1.6, "peer tok/s": 64.0}


def _child(args: argparse.Namespace) -> dict[str, float]:
    import torch

    torch.set_num_threads(args.threads)
    work = Path(args.work)
    out: dict[str, float] = {}
    if args.phase == "make":
        from transformers import AutoModelForCausalLM, LlamaConfig

        config = LlamaConfig(
            hidden_size=args.hidden,
            intermediate_size=args.intermediate,
            num_hidden_layers=args.layers,
            num_attention_heads=args.hidden // 128,
            num_key_value_heads=args.hidden // 128,
            vocab_size=32000,
            max_position_embeddings=2048,
        )
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.save_pretrained(work / "dense", max_shard_size="512MB")
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "qhf" / "tests"))
        from tiny_models import build_tokenizer

        build_tokenizer().save_pretrained(work / "dense")
        ids = torch.randint(3, 300, (args.samples, args.length), generator=torch.Generator().manual_seed(1))
        torch.save(ids, work / "calibration.pt")
    elif args.phase == "dense_forward":
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(work / "dense", dtype=torch.float32).eval()
        ids = torch.load(work / "calibration.pt")
        start = time.perf_counter()
        with torch.no_grad():
            for row in ids:
                model.model(input_ids=row[None], use_cache=False)
        out["seconds"] = time.perf_counter() - start
        out["gen_tok_s"] = _generate_speed(model, args.gen_tokens)
    elif args.phase in ("quantize", "quantize_per_group"):
        import qhf

        ids = torch.load(work / "calibration.pt")
        start = time.perf_counter()
        cpu_start = time.process_time()
        qm = qhf.load(work / "dense", {"method": "gptq", "bits": 4, "group_size": 128})
        qm.quantize([row.tolist() for row in ids], lockstep=args.phase == "quantize")
        out["quantize_seconds"] = time.perf_counter() - start
        out["quantize_cpu_seconds"] = time.process_time() - cpu_start
        save_start = time.perf_counter()
        qm.save(work / ("quant" if args.phase == "quantize" else "quant_per_group"), verify=True)
        out["save_verify_seconds"] = time.perf_counter() - save_start
        out["seconds"] = time.perf_counter() - start
    elif args.phase == "generate":
        import qhf

        lm = qhf.load_quantized(work / "quant")
        out["gen_tok_s"] = _generate_speed(lm.model, args.gen_tokens)
        out["backends"] = sorted(set(lm.backends.values()))  # type: ignore[assignment]
    out["peak_rss_gib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2
    return out


def _generate_speed(model: object, tokens: int) -> float:
    import torch

    prompt = torch.arange(3, 35)[None]
    with torch.no_grad():
        model.generate(prompt, max_new_tokens=4, do_sample=False, min_new_tokens=4)  # type: ignore[attr-defined]
        start = time.perf_counter()
        model.generate(prompt, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)  # type: ignore[attr-defined]
    return tokens / (time.perf_counter() - start)


def _run(phase: str, args: argparse.Namespace, work: str) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--phase", phase, "--work", work]
    for key in ("hidden", "intermediate", "layers", "samples", "length", "threads", "gen_tokens"):
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"phase {phase} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", default=None)
    parser.add_argument("--work", default=None)
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=5632)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--gen-tokens", type=int, default=32)
    parser.add_argument("--per-group", action="store_true", help="also quantize with per-group forwards")
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(_child(args)))
        return
    with tempfile.TemporaryDirectory(prefix="bench-qhf-") as work:
        _run("make", args, work)
        dense_bytes = sum(p.stat().st_size for p in (Path(work) / "dense").glob("*.safetensors"))
        dense = _run("dense_forward", args, work)
        quant = _run("quantize", args, work)
        per_group = _run("quantize_per_group", args, work) if args.per_group else None
        quant_bytes = sum(p.stat().st_size for p in (Path(work) / "quant").glob("*.safetensors"))
        gen = _run("generate", args, work)
    shape = (
        f"llama hidden {args.hidden}, {args.layers} layers, calib {args.samples}x{args.length}, {args.threads} threads"
    )
    rows = [
        ("dense forward over calibration (s)", dense["seconds"], "1.00x (baseline)"),
        (
            "GPTQ quantize (s)",
            quant["quantize_seconds"],
            f"{quant['quantize_seconds'] / dense['seconds']:.1f}x dense fwd",
        ),
        ("GPTQ quantize, process CPU (s)", quant["quantize_cpu_seconds"], "all threads; steadier on a shared CPU"),
        (
            "save + verify (s)",
            quant["save_verify_seconds"],
            f"{quant['save_verify_seconds'] / dense['seconds']:.1f}x dense fwd",
        ),
        (
            "quantize+save+verify peak RSS (GiB)",
            quant["peak_rss_gib"],
            f"{quant['peak_rss_gib'] / (dense_bytes / 1024**3):.2f}x dense size",
        ),
        ("dense checkpoint size (GiB)", dense_bytes / 1024**3, "1.00x"),
        ("quantized checkpoint size (GiB)", quant_bytes / 1024**3, f"{quant_bytes / dense_bytes:.2f}x dense size"),
        ("dense generate (tok/s)", dense["gen_tok_s"], "1.00x"),
        ("quantized reload+generate (tok/s)", gen["gen_tok_s"], f"{gen['gen_tok_s'] / dense['gen_tok_s']:.2f}x dense"),
        ("reload+generate peak RSS (GiB)", gen["peak_rss_gib"], ""),
    ]
    if per_group is not None:
        rows[3:3] = [
            (
                "GPTQ quantize, per-group forwards (s)",
                per_group["quantize_seconds"],
                f"lockstep is {per_group['quantize_seconds'] / quant['quantize_seconds']:.2f}x faster",
            ),
            (
                "  same, process CPU (s)",
                per_group["quantize_cpu_seconds"],
                f"{per_group['quantize_cpu_seconds'] / quant['quantize_cpu_seconds']:.2f}x lockstep's",
            ),
            (
                "  same, peak RSS (GiB)",
                per_group["peak_rss_gib"],
                f"{per_group['peak_rss_gib'] / quant['peak_rss_gib']:.2f}x lockstep's",
            ),
        ]
    print(f"qhf end to end: {shape}; backends {gen['backends']}")
    print(f"{'measure':40s} {'value':>10s}  ratio")
    for name, value, ratio in rows:
        print(f"{name:40s} {value:10.2f}  {ratio}")
    print("peers (issue, not this run): " + ", ".join(f"{k} {v}" for k, v in PEERS.items()))


if __name__ == "__main__":
    main()
