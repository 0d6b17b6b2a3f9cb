"""qformats' checkpoint writer: peak memory of writing streamed tensors, shard held in memory against streamed.

Writes ``--tensors`` float16 tensors of ``--mib`` MiB each, produced one at a time by a generator (as a streaming
quantization's save reads them from its spill), into one checkpoint with ``max_shard_size`` 4 GB, in a fresh
process per variant, and prints each process's peak resident memory (``VmHWM``) above its resident memory just
before the write. ``held`` is the previous writer (each shard's arrays collected in a dict and encoded at once,
re-created here from :func:`qformats.checkpoint.safetensors_io.write_safetensors`); ``streamed`` is
:func:`qformats.checkpoint.writer.write_checkpoint` (:mod:`qformats.checkpoint.streamed_shard`). The two files
are compared byte for byte. Asserts nothing about time or memory.

    python benchmarks/bench_qformats_writer_memory.py [--tensors 24] [--mib 64]
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def vm_kib(field: str) -> int:
    """``field`` (``VmHWM``, ``VmRSS``) of this process in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def tensors(count: int, mib: int):
    """``count`` float16 tensors of ``mib`` MiB, made one at a time."""
    for k in range(count):
        yield f"model.layers.{k}.weight", np.full(mib * 2**19, k % 7, dtype=np.float16)


def child(variant: str, out: Path, count: int, mib: int) -> None:
    """Write one checkpoint with ``variant``; print peak-above-start MiB, seconds and the shard's sha256."""
    from qformats.checkpoint.safetensors_io import write_safetensors
    from qformats.checkpoint.writer import write_checkpoint

    start_rss = vm_kib("VmRSS")
    began = time.perf_counter()
    if variant == "held":
        out.mkdir()
        write_safetensors(out / "model.safetensors", dict(tensors(count, mib)), {"format": "pt"}, checksums=True)
    else:
        write_checkpoint(out, tensors(count, mib), quantize_config=None, validate=False)
    seconds = time.perf_counter() - began
    peak_mib = (vm_kib("VmHWM") - start_rss) / 1024
    digest = hashlib.sha256()
    with open(out / "model.safetensors", "rb") as fh:
        for block in iter(lambda: fh.read(2**24), b""):
            digest.update(block)
    print(f"{peak_mib:.0f} {seconds:.2f} {digest.hexdigest()[:16]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=24)
    parser.add_argument("--mib", type=int, default=64)
    parser.add_argument("--child", choices=("held", "streamed"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.out, args.tensors, args.mib)
        return
    print(f"{args.tensors} float16 tensors of {args.mib} MiB ({args.tensors * args.mib} MiB), one shard")
    print("| writer | peak above start, MiB | seconds | sha256 of the shard |")
    print("| --- | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory() as work:
        for variant in ("held", "streamed"):
            cmd = [sys.executable, __file__, "--child", variant, "--out", str(Path(work) / variant)]
            cmd += ["--tensors", str(args.tensors), "--mib", str(args.mib)]
            peak, seconds, digest = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
            print(f"| {variant} | {peak} | {seconds} | {digest} |")


if __name__ == "__main__":
    main()
