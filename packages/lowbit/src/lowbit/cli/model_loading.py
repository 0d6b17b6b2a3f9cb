"""Opening what ``eval`` and ``quickstart`` evaluate: a quantized checkpoint or a dense source, through qhf.

A directory is a quantized checkpoint when it holds ``quantize_config.json`` or a ``config.json`` with a
``quantization_config``; it is then loaded with ``qhf.load_quantized``. Anything else (a Hugging Face
directory, a ``.gguf`` file) is opened with ``qhf.load`` and fully materialized as the dense model.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError


@dataclass
class LoadedModel:
    """``model`` (a transformers causal LM), its ``tokenizer``, ``kind`` ("quantized" or "dense"), and for
    quantized checkpoints the backend serving each quantized module."""

    model: Any
    tokenizer: Any
    kind: str
    backends: dict[str, str]


def is_quantized_directory(path: Path) -> bool:
    """True when ``path`` is a directory holding a quantization config (see the module docstring)."""
    if not path.is_dir():
        return False
    if os.path.lexists(path / "quantize_config.json"):
        return True
    if not os.path.lexists(path / "config.json"):
        return False
    from qhf.source.json_files import read_json_file

    data = read_json_file(path, "config.json")  # outside the directory, not UTF-8, too deep: refused by name
    return isinstance(data, dict) and isinstance(data.get("quantization_config"), dict)


def load_for_eval(path: str | Path, *, backend: str = "auto", device: Any = "cpu") -> LoadedModel:
    """The model at ``path`` ready to run on ``device`` (see the module docstring)."""
    import qhf

    target = Path(path)
    if not target.exists():
        raise UsageError(f"{str(target)!r} does not exist (expected a checkpoint directory, HF directory or .gguf)")
    if is_quantized_directory(target):
        loaded = qhf.load_quantized(target, backend=backend, device=device)
        return LoadedModel(loaded.model, loaded.tokenizer, "quantized", dict(loaded.backends))
    opened = qhf.load(target)
    model = opened.source.materialize_all().to(device)
    return LoadedModel(model.eval(), opened.tokenizer, "dense", {})


def generate_text(model: Any, tokenizer: Any, prompt: str, max_new_tokens: int) -> str:
    """Greedy continuation of ``prompt`` (decoded, prompt excluded)."""
    import torch

    encoded = tokenizer(prompt, return_tensors="pt").to(model.device)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    with torch.no_grad():
        out = model.generate(**encoded, max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=pad)
    return str(tokenizer.decode(out[0, encoded["input_ids"].shape[1] :], skip_special_tokens=True))


def backend_counts(backends: dict[str, str]) -> str:
    """``"cpu_int4 x 210"`` style summary of which backend serves how many modules."""
    counts: dict[str, int] = {}
    for name in backends.values():
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} x {count}" for name, count in sorted(counts.items())) or "-"
