"""Engine facts of a saved checkpoint directory (through :func:`qformats.inspect.inspect`) or of settings."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from ..inspect import CheckpointSummary
from .facts import CheckpointFacts, LinearShape


def _config_json(directory: Path) -> dict[str, object]:
    try:
        data = json.loads((directory / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def facts_from_summary(summary: CheckpointSummary) -> CheckpointFacts:
    """Facts of an inspected directory: settings from its quantization config, ``dtype`` from ``config.json``
    (``dtype``, else the older ``torch_dtype``), shapes from its modules."""
    config = _config_json(Path(summary.path))
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        quant = {}
    dtype = config.get("dtype") or config.get("torch_dtype")
    return CheckpointFacts(
        format=summary.format,
        bits=int(summary.bits),
        group_size=int(summary.group_size),
        sym=bool(summary.sym),
        desc_act=bool(quant.get("desc_act", False)),
        dtype=str(dtype) if isinstance(dtype, str) else None,
        modules=tuple(
            LinearShape(m.name, m.in_features, m.out_features, m.bits if m.bits != summary.bits else None)
            for m in summary.modules
        ),
    )


def facts_from_settings(
    *,
    format: str,
    bits: int,
    group_size: int,
    sym: bool,
    desc_act: bool,
    dtype: str | None,
    modules: Iterable[tuple[str, int, int]],
) -> CheckpointFacts:
    """Facts of a checkpoint not yet written (what ``lowbit quantize --target`` checks before any work)."""
    shapes = tuple(LinearShape(name, int(k), int(n)) for name, k, n in modules)
    return CheckpointFacts(format, int(bits), int(group_size), bool(sym), bool(desc_act), dtype, shapes)
