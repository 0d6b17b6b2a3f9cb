"""Fixtures of the fault session: a tiny quantized checkpoint, killed children, outcome tallies."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

REFUSED, IDENTICAL, OTHER = "refused by name", "loaded identical", "anything else"
HANG_GUARD_S = 300
BITS, GROUP = 4, 32
CONFIG = {"bits": BITS, "group_size": GROUP, "sym": True, "desc_act": False, "quant_method": "gptq", "format": "gptq"}


def tiny_source(directory: Path) -> Path:
    """lowbit's tests' seeded 2-layer llama (hidden 64) with its tokenizer, plus a generation config."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "packages" / "lowbit" / "tests"))
    from tiny_model import save_tiny_llama

    save_tiny_llama(directory, layers=2)
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    return directory


def quantized_tensors(source: Path) -> dict[str, np.ndarray]:
    """Every projection of ``source`` as a random symmetric 4-bit gptq module; the rest as stored."""
    from qformats.logical import QuantizedWeight, default_g_idx, group_count
    from qformats.transcode import transcode_weight
    from safetensors.numpy import load_file

    rng = np.random.default_rng(3)
    tensors: dict[str, np.ndarray] = {}
    for name, value in sorted(load_file(str(source / "model.safetensors")).items()):
        if not name.endswith("proj.weight"):
            tensors[name] = value
            continue
        out, in_ = value.shape
        groups = group_count(in_, GROUP)
        weight = QuantizedWeight(
            codes=rng.integers(0, 16, (out, in_)).astype(np.uint8),
            scales=(rng.random((groups, out)) * 0.02 + 0.001).astype(np.float16),
            zeros=np.full((groups, out), 8, dtype=np.int32), g_idx=default_g_idx(in_, GROUP),
            bits=BITS, group_size=GROUP, sym=True,
        )  # fmt: skip
        packed = transcode_weight(weight, "gptq").tensors
        tensors.update({f"{name[: -len('.weight')]}.{k}": v for k, v in packed.items()})
    return tensors


def write_quantized(source: Path, out: Path, tensors: dict[str, np.ndarray], shard: str = "4GB") -> Path:
    """``tensors`` as a gptq checkpoint at ``out`` (unvalidated) with ``source``'s tokenizer and side files."""
    from qformats.checkpoint import write_checkpoint

    model_config = json.loads((source / "config.json").read_text())
    model_config["quantization_config"] = CONFIG
    names = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json")
    write_checkpoint(
        out, tensors, quantize_config=CONFIG, model_config=model_config, max_shard_size=shard, validate=False,
        side_files=(source, names),
    )  # fmt: skip
    return out


def files_of(directory: Path) -> dict[str, bytes]:
    """Every regular file's bytes under ``directory`` (relative names)."""
    return {
        str(p.relative_to(directory)): p.read_bytes()
        for p in sorted(directory.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def killed(point: str, hit: int, work: Callable[[], Any]) -> bool:
    """Run ``work`` in a forked child with ``QFORMATS_FAULT=<point>#<hit>``; True when SIGKILL ended it."""
    from qformats.checkpoint import fault_points

    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            os.environ[fault_points.ENV_VAR] = f"{point}#{hit}"
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                work()
        except BaseException:  # the child must never return into pytest
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@contextlib.contextmanager
def hang_guard(label: str) -> Iterator[None]:
    """Raise ``TimeoutError`` naming ``label`` when the block runs for minutes (a reader blocked)."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"{label}: blocked for {HANG_GUARD_S} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(HANG_GUARD_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def print_tally(title: str, tally: Counter[str], others: list[str]) -> None:
    """One line of counts (the three outcomes always shown), then every 'anything else' case."""
    print(f"{title}: " + ", ".join(f"{k} {tally.get(k, 0)}" for k in (REFUSED, IDENTICAL, OTHER)), flush=True)
    for line in others:
        print(f"    {OTHER}: {line}", flush=True)


def copy_dir(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target
