"""qcheckpoint: commit and load throughput beside plain write+fsync / read of the same bytes on this disk.

Commits N artifacts (default 100 x 10 MiB = 1000 MiB) through ``CheckpointStore.put`` + ``commit`` and compares
the time with writing the same buffers to plain files with write + fsync (the floor for durable writes), run
side by side in the same process and directory, alternating, several rounds. Also times ``load`` (which re-hashes
every object) beside a plain read of the same files. Prints a table of medians and ratios; asserts nothing.

    python benchmarks/bench_qcheckpoint_commit.py [--objects 100] [--mib 10] [--rounds 3] [--dir PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from qcheckpoint import CheckpointStore, encode_continuation

IDENTITY = {"bench": "commit"}


def plain_write(directory: Path, buffers: list[bytes]) -> float:
    directory.mkdir()
    start = time.perf_counter()
    for index, data in enumerate(buffers):
        fd = os.open(directory / f"part-{index}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
    dfd = os.open(directory, os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    return time.perf_counter() - start


def plain_read(directory: Path, hashed: bool = False) -> float:
    start = time.perf_counter()
    for path in sorted(directory.iterdir()):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while block := handle.read(8 * 1024 * 1024):
                if hashed:
                    digest.update(block)
    return time.perf_counter() - start


def store_commit(root: Path, buffers: list[bytes]) -> float:
    start = time.perf_counter()
    with CheckpointStore(root) as store:
        store.load(IDENTITY)
        artifacts = {f"layer.{i}": store.put(data) for i, data in enumerate(buffers)}
        continuation = store.put(encode_continuation({"cursor": len(buffers)}))
        store.commit(IDENTITY, len(buffers), continuation, artifacts)
    return time.perf_counter() - start


def store_load(root: Path) -> float:
    start = time.perf_counter()
    with CheckpointStore(root) as store:
        loaded = store.load(IDENTITY)
        if loaded is None:
            raise RuntimeError("benchmark generation did not load")
    return time.perf_counter() - start


def drop_cache_hint(directory: Path) -> None:
    """Ask the kernel to drop the files' cached pages so reads hit the disk (best effort, Linux only)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return
    for path in directory.rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--mib", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    buffers = [rng.bytes(args.mib * 1024 * 1024) for _ in range(args.objects)]
    total_mib = args.objects * args.mib
    base = Path(tempfile.mkdtemp(prefix="bench_qcheckpoint_", dir=args.dir))
    times: dict[str, list[float]] = {"plain": [], "commit": [], "read": [], "read+sha": [], "load": []}
    try:
        for round_index in range(args.rounds):
            order = ["plain", "commit"] if round_index % 2 == 0 else ["commit", "plain"]
            for kind in order:
                target = base / f"{kind}-{round_index}"
                if kind == "plain":
                    times["plain"].append(plain_write(target, buffers))
                    drop_cache_hint(target)
                    times["read"].append(plain_read(target))
                    drop_cache_hint(target)
                    times["read+sha"].append(plain_read(target, hashed=True))
                else:
                    times["commit"].append(store_commit(target, buffers))
                    drop_cache_hint(target)
                    times["load"].append(store_load(target))
                shutil.rmtree(target)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"qcheckpoint commit benchmark: {args.objects} objects x {args.mib} MiB = {total_mib} MiB, {args.rounds} rounds"
    )
    print("ratios: the commit row vs plain write+fsync; the read rows vs plain read")
    print(f"{'operation':<44} {'median s':>9} {'MiB/s':>8} {'ratio':>7}")
    rows = [
        ("plain write+fsync per file (baseline)", med["plain"], 1.0),
        ("CheckpointStore put x N + commit", med["commit"], med["commit"] / med["plain"]),
        ("plain read of the files (baseline)", med["read"], 1.0),
        ("plain read + sha256, one thread", med["read+sha"], med["read+sha"] / med["read"]),
        ("CheckpointStore load (re-hash everything)", med["load"], med["load"] / med["read"]),
    ]
    for name, seconds, ratio in rows:
        print(f"{name:<44} {seconds:>9.3f} {total_mib / seconds:>8.0f} {ratio:>6.2f}x")
    print("all rounds (s):", {k: [round(x, 3) for x in v] for k, v in times.items()})


if __name__ == "__main__":
    main()
