"""GPTQ peak memory on the hidden-2048, 4-layer Llama: this tree against a baseline tree, side by side.

Each configuration runs ``qhf.load`` + ``quantize`` + ``save(verify=True)`` (GPTQ 4-bit g128, 32 x 256
calibration tokens, the shape of issue 22) in its own subprocess, so its peak resident set
(``ru_maxrss``) is its own. Configurations: this tree with lockstep forwards and with per-group forwards;
with ``--baseline-src DIR`` (a directory holding ``packages/<pkg>/src`` of another revision, e.g.
``git archive <rev> packages | tar -x -C DIR``) the same again on that revision, and the saved checkpoint
files are compared byte for byte with the baseline's. Prints peak GiB, quantize wall and process CPU
seconds and their ratios to the first baseline row. The peers' ~1.6 GiB (issue 22, another machine) is
printed for orientation. Nothing is asserted.

    python benchmarks/bench_qlooper_gptq_memory.py [--baseline-src DIR] [--layers 4] [--modes lockstep,per-group]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
PEER_PEAK_GIB = 1.6


def _child(work: Path, mode: str, out: Path, threads: int) -> dict[str, object]:
    import torch

    torch.set_num_threads(threads)
    import qhf

    ids = torch.load(work / "calibration.pt")
    start, cpu = time.perf_counter(), time.process_time()
    qm = qhf.load(work / "dense", {"method": "gptq", "bits": 4, "group_size": 128})
    qm.quantize([row.tolist() for row in ids], lockstep=mode == "lockstep")
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    qm.save(out, verify=True)
    digest = hashlib.sha256()
    for path in sorted(out.glob("*.safetensors")):
        digest.update(path.read_bytes())
    return {
        "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "sha256": digest.hexdigest(),
        "qhf": str(Path(qhf.__file__).resolve().parents[3]),
    }


def _pythonpath(tree: Path) -> str:
    return os.pathsep.join(str(p) for p in sorted((tree / "packages").glob("*/src")))


def _run(tree: Path, work: Path, mode: str, threads: int) -> dict[str, object]:
    out = work / f"quant-{abs(hash((str(tree), mode)))}"
    env = {**os.environ, "PYTHONPATH": _pythonpath(tree)}
    cmd = [sys.executable, str(HERE), "--phase", mode, "--work", str(work), "--out", str(out)]
    done = subprocess.run([*cmd, "--threads", str(threads)], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree} {mode} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", default=None)
    parser.add_argument("--work", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--baseline-src", default=None, help="a tree holding packages/<pkg>/src of another revision")
    parser.add_argument("--modes", default="lockstep,per-group")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=5632)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(_child(Path(args.work), args.phase, Path(args.out), args.threads)))
        return
    trees = [("baseline", Path(args.baseline_src))] if args.baseline_src else []
    trees.append(("this tree", ROOT))
    modes = [m for m in args.modes.split(",") if m]
    with tempfile.TemporaryDirectory(prefix="bench-gptq-mem-") as tmp:
        work = Path(tmp)
        make = [sys.executable, str(ROOT / "benchmarks" / "bench_qhf_end_to_end.py"), "--phase", "make"]
        make += ["--work", tmp, "--hidden", str(args.hidden), "--intermediate", str(args.intermediate)]
        make += ["--layers", str(args.layers), "--samples", str(args.samples), "--length", str(args.length)]
        subprocess.run(make, check=True, capture_output=True)
        rows = [(name, mode, _run(tree, work, mode, args.threads)) for name, tree in trees for mode in modes]
    base = rows[0][2]
    shape = f"llama hidden {args.hidden}, {args.layers} layers, calib {args.samples}x{args.length}"
    shape += f", {args.threads} threads"
    print(f"GPTQ quantize+save+verify peak memory: {shape}")
    header = f"{'tree':10s} {'mode':10s} {'peak GiB':>9s} {'x base':>7s} {'wall s':>8s} {'cpu s':>8s} {'x base':>7s}"
    print(header + "  checkpoint bytes")
    for name, mode, r in rows:
        same = "same as base" if r["sha256"] == base["sha256"] else f"differ ({str(r['sha256'])[:12]})"
        print(
            f"{name:10s} {mode:10s} {r['peak_gib']:9.2f} {float(r['peak_gib']) / float(base['peak_gib']):7.2f} "
            f"{r['seconds']:8.1f} {r['cpu_seconds']:8.1f} {float(r['cpu_seconds']) / float(base['cpu_seconds']):7.2f}"
            f"  {same}"
        )
    print(f"peers (issue 22, another machine, not this run): peak {PEER_PEAK_GIB} GiB")


if __name__ == "__main__":
    main()
