"""Shared helpers of the mlx session: running ``lowbit``, MLX's own dequantization of a written directory,
and logits / perplexity from mlx_lm and from lowbit over the same token ids."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np

TIMEOUT_S = 3600  # a hang guard only
#: |mx.dequantize - lowbit| <= MLX_FP16 * (|s*q| + |s*z|) + 2**-23: mlx evaluates ``s * q + b`` in float16 (two
#: roundings of 2**-11) after the float16 bias rounding (2**-11 of |s*z|); 2**-23 covers float16 subnormals.
MLX_FP16 = 2.0**-10


def lowbit(*args: str) -> str:
    """``python -m lowbit ARGS`` (must succeed); returns and prints its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", "lowbit", *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, f"lowbit {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    print(done.stdout)
    return done.stdout


def dequantization_check(source: Path, mlx_dir: Path) -> dict[str, float]:
    """For every module of checkpoint ``source``: ``mx.dequantize`` of the MLX tensors (loaded by ``mx.load``)
    vs lowbit's dequantized weight, asserted within the bound above. Returns the largest ratio of error to
    bound and the largest absolute error."""
    import mlx.core as mx
    from qformats.checkpoint import open_checkpoint

    arrays: dict[str, mx.array] = {}
    for path in sorted(mlx_dir.glob("model*.safetensors")):
        arrays.update(mx.load(str(path)))
    quantization = __import__("json").loads((mlx_dir / "config.json").read_text())["quantization"]
    checkpoint = open_checkpoint(source)
    worst_ratio, worst_abs = 0.0, 0.0
    for entry in checkpoint.modules():
        spec = quantization.get(entry.prefix, quantization)
        weight = checkpoint.unpack(entry)
        got = mx.dequantize(
            arrays[f"{entry.prefix}.weight"], arrays[f"{entry.prefix}.scales"], arrays[f"{entry.prefix}.biases"],
            group_size=spec["group_size"], bits=spec["bits"],
        )  # fmt: skip
        got = np.array(got.astype(mx.float32))
        want = weight.dequantize()
        s = weight.scales.astype(np.float32)[weight.g_idx].T
        z = weight.zeros.astype(np.float32)[weight.g_idx].T
        bound = MLX_FP16 * (np.abs(s * weight.codes) + np.abs(s * z)) + 2.0**-23
        error = np.abs(got - want)
        assert np.all(error <= bound), f"{entry.prefix}: max error {error.max()} above the bound"
        worst_ratio = max(worst_ratio, float((error / bound).max()))
        worst_abs = max(worst_abs, float(error.max()))
    return {"modules": len(checkpoint.modules()), "worst_error_over_bound": worst_ratio, "max_abs_error": worst_abs}


def mlx_logits(mlx_dir: Path, windows: list[list[int]]) -> list[np.ndarray]:
    """float32 logits ``[T, vocab]`` of each window from ``mlx_lm.load(mlx_dir)``."""
    import mlx.core as mx
    from mlx_lm import load

    model, _ = load(str(mlx_dir))
    return [np.array(model(mx.array(np.asarray([w], dtype=np.int32)))[0].astype(mx.float32)) for w in windows]


def lowbit_logits(checkpoint: Path, windows: list[list[int]]) -> list[np.ndarray]:
    """float32 logits of each window from lowbit's own loading of the checkpoint (qhf.load_quantized)."""
    import torch
    from lowbit.cli.model_loading import load_for_eval

    loaded = load_for_eval(checkpoint)
    with torch.no_grad():
        return [loaded.model(torch.tensor([w])).logits[0].float().numpy() for w in windows]


def perplexity(logits: list[np.ndarray], windows: list[list[int]]) -> float:
    """exp of the mean next-token negative log likelihood over every window."""
    total, counted = 0.0, 0
    for lg, w in zip(logits, windows, strict=True):
        shifted = lg[:-1].astype(np.float64) - lg[:-1].max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        total -= float(logp[np.arange(len(w) - 1), w[1:]].sum())
        counted += len(w) - 1
    return math.exp(total / counted)


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file() and p.suffix == ".safetensors")
