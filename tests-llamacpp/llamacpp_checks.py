"""What every tests-llamacpp test does with a lowbit-written .gguf: run ``lowbit``, generate with llama.cpp, and
compute perplexity over the same token windows from llama.cpp's logits and from lowbit's own reading of the file.

Windows are ``qhf.perplexity.windows_of(ids, WINDOW, bos_id)``: with ``bos_id`` (the tokenizer prepends BOS, as
Gemma's does) each window is BOS + ``WINDOW - 1`` stream tokens, as ``qhf.evaluate`` builds them.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np

WINDOW = 256
TOLERANCE = 0.02
TIMEOUT_S = 3600  # a hang guard only


def lowbit(*args: str) -> str:
    """``python -m lowbit ARGS`` (must succeed); its stdout, also printed."""
    done = subprocess.run(
        [sys.executable, "-m", "lowbit", *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, f"lowbit {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    print(done.stdout)
    return done.stdout


def llama_cpp_generation(path: Path, prompt: str, tokens: int = 12) -> str:
    """llama.cpp's greedy continuation of ``prompt`` (must be at least one non-blank token)."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=256, n_threads=2, verbose=False)
    completion = llm(prompt, max_tokens=tokens, temperature=0.0)
    text = completion["choices"][0]["text"]
    assert completion["usage"]["completion_tokens"] >= 1 and text.strip(), completion
    return str(text)


def llama_cpp_perplexity(path: Path, ids: list[int], bos_id: int | None) -> float:
    """Perplexity from llama.cpp's logits (``logits_all``) over the windows of ``ids``."""
    from llama_cpp import Llama
    from qhf.perplexity import windows_of

    llm = Llama(model_path=str(path), n_ctx=WINDOW, n_batch=WINDOW, logits_all=True, n_threads=2, verbose=False)
    total, counted = 0.0, 0
    for chunk in windows_of(ids, WINDOW, bos_id):
        llm.reset()
        llm.eval(chunk)
        logits = np.asarray(llm.scores[: len(chunk) - 1], dtype=np.float64)
        shifted = logits - logits.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        total -= float(logp[np.arange(len(chunk) - 1), chunk[1:]].sum())
        counted += len(chunk) - 1
    return math.exp(total / counted)


def lowbit_perplexity(path: Path, ids: list[int]) -> tuple[float, int | None]:
    """(perplexity of lowbit's reading of ``path``, the BOS id its windows started with or None)."""
    import qhf
    import torch
    from lowbit.cli.model_loading import load_for_eval

    torch.set_num_threads(2)
    loaded = load_for_eval(path)
    result = qhf.evaluate(loaded.model, loaded.tokenizer, ids, window=WINDOW)
    return result.perplexity, (int(loaded.tokenizer.bos_token_id) if result.bos else None)


def check_same_perplexity(label: str, path: Path, ids: list[int]) -> tuple[float, float]:
    """lowbit's and llama.cpp's perplexity of ``path`` agree within :data:`TOLERANCE`; (lowbit, llama.cpp)."""
    ours, bos_id = lowbit_perplexity(path, ids)
    theirs = llama_cpp_perplexity(path, ids, bos_id)
    windows = math.ceil(len(ids) / (WINDOW - (bos_id is not None)))
    print(f"{label}: perplexity over {windows} windows of {WINDOW} (BOS first: {bos_id is not None}): lowbit "
          f"{ours:.4f}, llama.cpp {theirs:.4f}, ratio {theirs / ours:.4f}")  # fmt: skip
    assert math.isfinite(ours) and math.isfinite(theirs)
    assert abs(theirs - ours) / ours < TOLERANCE, (label, ours, theirs)
    return ours, theirs
