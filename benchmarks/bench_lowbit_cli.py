"""What the ``lowbit`` command adds on top of the packages it calls: start-up and per-command overhead.

Each row is the median wall time of ``--runs`` fresh subprocesses (start-up included, as a user sees it),
measured side by side in this run. Baselines: ``python -c pass`` (interpreter start) for ``lowbit --help``
(which must not import torch), and ``python -m qformats.inspect DIR`` for ``lowbit inspect DIR`` (the same
summary, through the CLI). The checkpoint is a tiny llama quantized with RTN by qhf in this script.
Asserts nothing about time.

    python benchmarks/bench_lowbit_cli.py [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "packages" / "lowbit" / "tests"))


def _median_seconds(command: list[str], runs: int) -> float:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        samples.append(time.perf_counter() - start)
        if done.returncode not in (0, 1):
            raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return statistics.median(samples)


def _quantized_checkpoint(work: Path) -> Path:
    import qhf
    from tiny_model import save_tiny_llama

    source = save_tiny_llama(work / "tiny", layers=2)
    qm = qhf.load(source, {"method": "rtn", "bits": 4, "group_size": 32})
    qm.quantize()
    qm.save(work / "rtn")
    return work / "rtn"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="subprocesses per row (median)")
    runs = parser.parse_args().runs
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = str(_quantized_checkpoint(Path(tmp)))
        inspect_base = "python -m qformats.inspect DIR"
        rows = [
            ("python -c pass", [py, "-c", "pass"], None),
            ("lowbit --help", [py, "-m", "lowbit", "--help"], "python -c pass"),
            ("python -c 'import torch'", [py, "-c", "import torch"], "python -c pass"),
            ("python -m qformats.inspect DIR", [py, "-m", "qformats.inspect", ckpt], None),
            ("lowbit inspect DIR", [py, "-m", "lowbit", "inspect", ckpt], inspect_base),
            (
                "lowbit inspect DIR --json",
                [py, "-m", "lowbit", "inspect", ckpt, "--json"],
                "python -m qformats.inspect DIR",
            ),
        ]
        measured: dict[str, float] = {}
        for name, command, _ in rows:
            measured[name] = _median_seconds(command, runs)
    print(f"median of {runs} fresh subprocesses each")
    print(f"{'command':<34} {'seconds':>8}  {'ratio':>6}  baseline")
    for name, _, base in rows:
        ratio = f"{measured[name] / measured[base]:.2f}" if base else "1.00"
        print(f"{name:<34} {measured[name]:>8.3f}  {ratio:>6}  {base or '(baseline)'}")


if __name__ == "__main__":
    main()
