"""Resume on qcheckpoint: interrupted runs (SIGTERM, SIGKILL at boundaries, inside a finalizer, inside a
commit) resume to packed tensors bit-identical to an uninterrupted run, for GPTQ and AWQ."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch
from qalgos.spec import QuantSpec
from qcheckpoint import CheckpointConfig, IdentityMismatchError
from qlooper import FinalizedModule, LoopOptions, quantize_model
from torch import nn
from toy_models import DENSE, ToyDecoder, toy_calibration

WORKER = Path(__file__).with_name("resume_worker.py")
SPEC = QuantSpec(bits=4, group_size=32)

# (fault argument, extra environment, expected return code). Attempt 1 stops cooperatively after committing
# boundary 1; attempt 2 resumes at 1, commits 2 and is killed while finalizing layer 2; attempt 3 resumes at 2,
# commits 3 and is killed at boundary 4 before committing it; attempt 4 resumes at 3 and finishes.
CHAIN = [
    ("sigterm@1", {}, 3),
    ("sigkill-finalizer@model.layers.2.mlp.up_proj", {}, -9),
    ("sigkill@4", {}, -9),
    ("none", {}, 0),
]


def baseline(method: str) -> tuple[dict[str, np.ndarray], list[dict]]:
    torch.manual_seed(1234)
    run = quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, method)
    arrays = {}
    for name, done in run.modules.items():
        arrays.update({f"{name}/{k}": v for k, v in done.tensors().items()})
        arrays.update({f"{name}/logical.{f}": getattr(done.weight, f) for f in ("codes", "scales", "zeros", "g_idx")})
    rows = [{k: v for k, v in asdict(r).items() if k not in ("seconds", "finalize_seconds")} for r in run.report]
    return arrays, rows


def start(method: str, root: Path, fault: str, env: dict[str, str]) -> subprocess.Popen:
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **env}
    args = [sys.executable, str(WORKER), method, str(root / "ckpt"), str(root / "out.npz"), fault]
    return subprocess.Popen(args, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_interrupted_runs_resume_bit_identical(tmp_path: Path) -> None:
    methods = ("gptq", "awq")
    roots = {m: tmp_path / m for m in methods}
    for step, (fault, env, expected) in enumerate(CHAIN):
        procs = {m: start(m, roots[m], fault, env) for m in methods}  # both chains side by side
        for method, proc in procs.items():
            out, err = proc.communicate(timeout=600)  # hang guard only
            assert proc.returncode == expected, f"{method} step {step} ({fault}): rc {proc.returncode}\n{err[-3000:]}"
            if expected == 3:
                assert "stopped at 1" in out
    for method in methods:
        result = json.loads((roots[method] / "out.npz.json").read_text())
        assert result["resumed_from"] == 3
        got = np.load(roots[method] / "out.npz")
        want, rows = baseline(method)
        assert sorted(got.files) == sorted(want)
        for key, value in want.items():
            assert got[key].dtype == value.dtype and np.array_equal(got[key], value), f"{method}: {key} differs"
        # every report field is identical except GPTQ's float loss, whose summation order may vary per process
        got_rows, want_rows = result["report"], json.loads(json.dumps(rows))
        assert [{**r, "loss": None} for r in got_rows] == [{**r, "loss": None} for r in want_rows]
        assert np.allclose([r["loss"] for r in got_rows], [r["loss"] for r in want_rows], rtol=1e-6, atol=0)


class Wrapped(nn.Module):
    def __init__(self, done: FinalizedModule) -> None:
        super().__init__()
        self.register_buffer("w", torch.from_numpy(done.weight.dequantize()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w.T


def replace(name: str, module: nn.Module, done: FinalizedModule) -> nn.Module | None:
    return Wrapped(done) if name.endswith("down_proj") else None


def test_completed_checkpoint_restores_everything_without_running_layers(tmp_path: Path) -> None:
    config = CheckpointConfig(path=tmp_path / "ckpt")
    options = LoopOptions(replace_module=replace, offload_dir=tmp_path / "offload")
    first_model = ToyDecoder()
    first = quantize_model(first_model, DENSE, toy_calibration(), SPEC, "gptq", checkpoint=config, options=options)
    assert first.resumed_from == 0
    model = ToyDecoder()
    ran = []
    for layer in model.model.layers:
        layer.register_forward_pre_hook(lambda *a: ran.append(1))  # capture would reach layer 0's pre-hook
    again = quantize_model(model, DENSE, toy_calibration(), SPEC, "gptq", checkpoint=config, options=options)
    assert again.resumed_from == 4 and not ran
    for name, done in first.modules.items():
        other = again.modules[name]
        assert other.weight.equals(done.weight)
        assert all(np.array_equal(other.tensors()[k], v) for k, v in done.tensors().items())
    assert [r.module for r in again.report] == [r.module for r in first.report]
    assert isinstance(model.model.layers[3].mlp.down_proj, Wrapped)  # replacement re-applied on restore
    b = toy_calibration().batches[0]
    with torch.no_grad():
        assert torch.equal(model(b.input_ids, b.attention_mask), first_model(b.input_ids, b.attention_mask))


def test_identity_mismatch_fails_closed(tmp_path: Path) -> None:
    config = CheckpointConfig(path=tmp_path / "ckpt")
    quantize_model(ToyDecoder(), DENSE, None, SPEC, "rtn", checkpoint=config)
    with pytest.raises(IdentityMismatchError) as info:
        quantize_model(ToyDecoder(), DENSE, None, QuantSpec(bits=3, group_size=32), "rtn", checkpoint=config)
    assert "processor" in info.value.fields
    with pytest.raises(IdentityMismatchError) as info:
        quantize_model(ToyDecoder(seed=5), DENSE, None, SPEC, "rtn", checkpoint=config)
    assert "source" in info.value.fields


class LazyLayers:
    """Wraps a processor: materializes layer ``i`` (kept on ``meta`` until then) from a reference model."""

    def __init__(self, inner: object, source: nn.Module) -> None:
        self._inner = inner
        self._source = source

    def start_layer(self, ctx) -> None:
        layer = ctx.layer
        layer.to_empty(device="cpu")
        layer.load_state_dict(self._source.model.layers[ctx.index].state_dict())
        self._inner.start_layer(ctx)

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


def lazy_model() -> nn.Module:
    model = ToyDecoder()
    for layer in model.model.layers:
        layer.to("meta")
    return model


def test_resume_restores_lazily_loaded_layers(tmp_path: Path) -> None:
    from qlooper.processors.gptq import GPTQProcessor

    config = CheckpointConfig(path=tmp_path / "ckpt")
    options = LoopOptions(source_identity="sha256-of-the-source-files")
    done_model = lazy_model()
    processor = LazyLayers(GPTQProcessor(SPEC), ToyDecoder())
    first = quantize_model(
        done_model, DENSE, toy_calibration(), None, processor, format="gptq", checkpoint=config, options=options
    )
    model = lazy_model()  # a new attempt: layers on meta again; the checkpoint must fill them
    again = quantize_model(
        model,
        DENSE,
        toy_calibration(),
        None,
        LazyLayers(GPTQProcessor(SPEC), ToyDecoder()),
        format="gptq",
        checkpoint=config,
        options=options,
    )
    assert again.resumed_from == 4
    assert not any(p.is_meta for p in model.parameters())
    assert all(again.modules[n].weight.equals(d.weight) for n, d in first.modules.items())
    b = toy_calibration().batches[0]
    with torch.no_grad():
        assert torch.equal(model(b.input_ids, b.attention_mask), done_model(b.input_ids, b.attention_mask))


class CrashAt:
    """An extension that fails the run at one boundary (before the checkpoint extension sees it)."""

    def __init__(self, cursor: int) -> None:
        self.cursor = cursor

    def on_boundary(self, boundary) -> None:
        if boundary.cursor == self.cursor:
            raise RuntimeError(f"simulated crash at boundary {self.cursor}")


def test_interval_commits_every_n_layers(tmp_path: Path) -> None:
    config = CheckpointConfig(path=tmp_path / "ckpt", interval="layer:2")
    with pytest.raises(RuntimeError, match="simulated crash at boundary 3"):
        quantize_model(
            ToyDecoder(),
            DENSE,
            toy_calibration(),
            SPEC,
            "awq",
            checkpoint=config,
            options=LoopOptions(extensions=(CrashAt(3),)),
        )
    resumed = quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, "awq", checkpoint=config)
    assert resumed.resumed_from == 2  # boundary 2 was committed, boundary 3 was not due
    fresh = quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, "awq")
    for name, done in fresh.modules.items():
        assert resumed.modules[name].weight.equals(done.weight), name
