"""GPTQ peak memory on the hidden-2048, 4-layer Llama: this tree against a baseline tree, side by side.

Each configuration runs ``qhf.load`` + ``quantize`` + ``save(verify=True)`` (GPTQ 4-bit g128, 32 x 256
calibration tokens, the shape of issue 22) in its own subprocess, so its peak resident set
(``ru_maxrss``) is its own. Configurations: each tree with its own defaults (``--modes default``); add
``lockstep`` (lockstep forces on, no budget) and ``per-group`` to ``--modes`` for those. With
``--baseline-src DIR`` (a directory holding ``packages/<pkg>/src`` of another revision, e.g.
``git archive <rev> packages | tar -x -C DIR``) every mode runs on that revision too, and the saved
checkpoint files are compared byte for byte with the baseline's.

The subprocesses run ``--jobs`` at a time (default 2: the baseline and this tree side by side, so both
meet the same machine load); the table gives quantize process CPU seconds (``time.process_time``, the
speed measure on a shared machine) next to wall seconds. A thread in each subprocess samples the resident
set every 5 ms and ``--phases`` prints each phase's peak (load, capture, each layer's accumulation and
solves per group, save, verify), where the tree's internals allow (patched by name; absent names are
skipped). The peers' ~1.6 GiB (issue 22, another machine) is printed for orientation. Nothing is asserted.

    python benchmarks/bench_qlooper_gptq_memory.py [--baseline-src DIR] [--modes default] [--work DIR] [--phases]
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
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
PEER_PEAK_GIB = 1.6
GIB = 2**30


class PhaseSampler:
    """Peak resident bytes per named phase, sampled every 5 ms from ``/proc/self/statm`` (Linux)."""

    def __init__(self) -> None:
        self.phase = "start"
        self.peaks: dict[str, int] = {}
        self._page = os.sysconf("SC_PAGE_SIZE")
        threading.Thread(target=self._sample, daemon=True).start()

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self._page

    def enter(self, phase: str) -> None:
        self.phase = phase
        self.peaks[phase] = max(self.peaks.get(phase, 0), self.rss())

    def _sample(self) -> None:
        while True:
            rss, phase = self.rss(), self.phase
            if rss > self.peaks.get(phase, 0):
                self.peaks[phase] = rss
            time.sleep(0.005)


def _wrap(owner: Any, name: str, label: Any, sampler: PhaseSampler, after: Any = None) -> None:
    """Enter phase ``label(*args)`` around ``owner.name`` (and ``after(*args)`` when it returns)."""
    original = getattr(owner, name, None)
    if original is None:
        return

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        sampler.enter(label(*args))
        try:
            return original(*args, **kwargs)
        finally:
            if after is not None:
                sampler.enter(after(*args))

    setattr(owner, name, wrapped)


def _instrument(sampler: PhaseSampler) -> None:
    import qlooper.loop as loop
    import qlooper.processors.gptq as gptq

    layer = [0]

    def group_names(group: Any) -> str:
        return ",".join(m.name.rsplit(".", 1)[-1] for m in group.modules)

    def start_layer(_self: Any, position: int, *_: Any) -> str:
        layer[0] = position
        return f"layer {position} load + forwards"

    _wrap(loop.LayerLoop, "_run_layer", start_layer, sampler, after=lambda *a: f"layer {layer[0]} finished")
    _wrap(
        gptq.GPTQProcessor,
        "observe",
        lambda _s, _c, g, _x: f"layer {layer[0]} accumulate {group_names(g)}",
        sampler,
    )
    _wrap(
        gptq.GPTQProcessor,
        "process",
        lambda _s, _c, g: f"layer {layer[0]} solve {group_names(g)}",
        sampler,
        after=lambda *a: f"layer {layer[0]} forwards",
    )
    try:
        import qhf.verify as verify
    except ImportError:
        return
    _wrap(verify, "verify_checkpoint", lambda *a: "save: verify", sampler, after=lambda *a: "save: publish")


def _child(work: Path, mode: str, out: Path, threads: int, phases: bool) -> dict[str, object]:
    sampler = PhaseSampler()
    import torch

    torch.set_num_threads(threads)
    import qhf

    if phases:
        _instrument(sampler)
    ids = torch.load(work / "calibration.pt")
    sampler.enter("load")
    start, cpu = time.perf_counter(), time.process_time()
    qm = qhf.load(work / "dense", {"method": "gptq", "bits": 4, "group_size": 128})
    sampler.enter("capture (base modules, first layer's inputs)")
    options: dict[str, Any] = {}
    if mode == "lockstep":
        options = {"lockstep": True, "lockstep_budget": None}
    elif mode == "per-group":
        options = {"lockstep": False}
    elif mode != "default":
        raise SystemExit(f"--modes: unknown mode {mode!r} (default, lockstep, per-group)")
    summary = qm.quantize([row.tolist() for row in ids], **options)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    sampler.enter("save: write")
    qm.save(out, verify=True)
    sampler.enter("done")
    digest = hashlib.sha256()
    for path in sorted(out.glob("*.safetensors")):
        with path.open("rb") as f:  # in chunks: reading a shard whole would add its size to the peak
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    return {
        "peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "sha256": digest.hexdigest(),
        "lockstep_skipped": len(getattr(summary, "lockstep_skipped", {}) or {}),
        "phases": {k: v / GIB for k, v in sampler.peaks.items()},
        "qhf": str(Path(qhf.__file__).resolve().parents[3]),
    }


def _pythonpath(tree: Path) -> str:
    return os.pathsep.join(str(p) for p in sorted((tree / "packages").glob("*/src")))


def _run(tree: Path, work: Path, mode: str, args: argparse.Namespace) -> dict[str, Any]:
    out = work / f"quant-{hashlib.sha256(f'{tree}:{mode}'.encode()).hexdigest()[:12]}"
    env = {**os.environ, "PYTHONPATH": _pythonpath(tree)}
    cmd = [sys.executable, str(HERE), "--phase", mode, "--work", str(work), "--out", str(out)]
    cmd += ["--threads", str(args.threads)] + (["--phases"] if args.phases else [])
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree} {mode} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _make(work: Path, args: argparse.Namespace) -> None:
    if (work / "calibration.pt").exists() and (work / "dense" / "config.json").exists():
        return  # a --work directory from an earlier run (same shape assumed)
    make = [sys.executable, str(ROOT / "benchmarks" / "bench_qhf_end_to_end.py"), "--phase", "make"]
    make += ["--work", str(work), "--hidden", str(args.hidden), "--intermediate", str(args.intermediate)]
    make += ["--layers", str(args.layers), "--samples", str(args.samples), "--length", str(args.length)]
    subprocess.run(make, check=True, capture_output=True)


def _table(rows: list[tuple[str, str, dict[str, Any]]], args: argparse.Namespace) -> None:
    base = rows[0][2]
    shape = f"llama hidden {args.hidden}, {args.layers} layers, calib {args.samples}x{args.length}"
    print(f"GPTQ g128 quantize + save + verify: {shape}, {args.threads} threads, {args.jobs} runs at a time")
    print("| tree | mode | peak GiB | x base | quantize CPU s | x base | wall s | lockstep off (layers) | checkpoint |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, mode, r in rows:
        same = "same bytes as base" if r["sha256"] == base["sha256"] else f"differs ({str(r['sha256'])[:12]})"
        print(
            f"| {name} | {mode} | {r['peak_gib']:.2f} | {r['peak_gib'] / base['peak_gib']:.2f} "
            f"| {r['cpu_seconds']:.1f} | {r['cpu_seconds'] / base['cpu_seconds']:.2f} | {r['seconds']:.1f} "
            f"| {r['lockstep_skipped']} | {same} |"
        )
    print(f"peers (issue 22, another machine, not this run): peak {PEER_PEAK_GIB} GiB")
    if args.phases:
        for name, mode, r in rows:
            print(f"\nper-phase peak resident GiB: {name}, {mode}")
            for phase, gib in r["phases"].items():
                print(f"  {gib:6.3f}  {phase}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--work", default=None, help="keep (or reuse) the dense model and calibration here")
    parser.add_argument("--baseline-src", default=None, help="a tree holding packages/<pkg>/src of another revision")
    parser.add_argument("--modes", default="default", help="comma list of default, lockstep, per-group")
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--intermediate", type=int, default=5632)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2, help="configurations run at a time")
    parser.add_argument("--phases", action="store_true", help="print each phase's peak resident set")
    args = parser.parse_args()
    if args.phase:
        result = _child(Path(args.work), args.phase, Path(args.out), args.threads, args.phases)
        print(json.dumps(result))
        return
    trees = [("baseline", Path(args.baseline_src))] if args.baseline_src else []
    trees.append(("this tree", ROOT))
    modes = [m for m in args.modes.split(",") if m]
    with tempfile.TemporaryDirectory(prefix="bench-gptq-mem-") as tmp:
        work = Path(args.work) if args.work else Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        _make(work, args)
        configs = [(name, tree, mode) for mode in modes for name, tree in trees]
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            results = list(pool.map(lambda c: _run(c[1], work, c[2], args), configs))
    _table([(name, mode, r) for (name, _, mode), r in zip(configs, results, strict=True)], args)


if __name__ == "__main__":
    main()
