"""Plain-text tables and sizes for the terminal (no third-party dependency).

``per_layer_rows`` folds the run's per-module report rows (qlooper ``ModuleReport``: ``layer``, ``module``,
``loss``, ``tokens``, ``damp``, ``fallback``/``fallback_reason``, ``seconds``) into one row per decoder layer:
summed loss, calibration tokens (the most any module saw), the largest damping used, the fallbacks and the
summed solve time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qlooper.report import ModuleReport

_UNITS = ("B", "KB", "MB", "GB", "TB")


def human_bytes(count: float) -> str:
    """``count`` bytes in decimal units (``98.4 MB``)."""
    value = float(count)
    for unit in _UNITS:
        if abs(value) < 1000 or unit == _UNITS[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"


def path_bytes(path: str | Path, suffixes: tuple[str, ...] = (".safetensors", ".gguf")) -> int:
    """Bytes of a file, or of the weight files (``suffixes``) directly inside a directory."""
    target = Path(path)
    if target.is_file():
        return target.stat().st_size
    return sum(p.stat().st_size for p in target.iterdir() if p.is_file() and p.suffix in suffixes)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.4g}"
    return str(value)


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A left-aligned text table; ``None`` prints as ``-``, floats with 4 significant digits."""
    cells = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells)
    return "\n".join(lines)


def per_layer_rows(module_rows: Iterable[ModuleReport]) -> list[list[Any]]:
    """One row per layer: ``[layer, modules, loss (sum), tokens (max), damp (max), fallbacks, seconds (sum)]``.

    A module's fallback reads as its ``fallback_reason``, else the fallback strategy's name."""
    layers: dict[Any, dict[str, Any]] = {}
    for row in module_rows:
        acc = layers.setdefault(
            row.layer, {"modules": 0, "loss": None, "tokens": None, "damp": None, "fallbacks": [], "seconds": 0.0}
        )
        acc["modules"] += 1
        for key, value, combine in (("loss", row.loss, sum), ("tokens", row.tokens, max), ("damp", row.damp, max)):
            if value is not None:
                acc[key] = value if acc[key] is None else combine((acc[key], value))
        fallback = row.fallback_reason or row.fallback
        if fallback:
            acc["fallbacks"].append(f"{row.module.rsplit('.', 1)[-1]}: {fallback}")
        acc["seconds"] += float(row.seconds or 0.0)
    out = []
    for layer in sorted(layers, key=lambda k: (k is None, k if isinstance(k, int) else 0)):
        acc = layers[layer]
        fallbacks = "; ".join(acc["fallbacks"]) or "none"
        out.append(
            [layer, acc["modules"], acc["loss"], acc["tokens"], acc["damp"], fallbacks, round(acc["seconds"], 2)]
        )
    return out


def describe_source(source: dict[str, Any], limit: int = 240) -> str:
    """qhf's ``calibration_source`` record as one line (hashes, the generation budget and the cache left out:
    :func:`generation_text` says those; cut at ``limit`` characters)."""
    skipped = ("generation_budget", "cache")
    text = ", ".join(f"{k}={v}" for k, v in source.items() if "sha256" not in str(k) and k not in skipped)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def generation_text(source: dict[str, Any]) -> str | None:
    """The generated rows' story in one line: the budget's decision (with its reason) and the cache state;
    None when the record has neither (the caller's own data, or the documentation alone asked for)."""
    budget, cache = source.get("generation_budget"), source.get("cache")
    parts = []
    if isinstance(budget, dict):
        granted, requested = budget.get("granted"), budget.get("requested")
        parts.append(f"{granted} of {requested} requested self-generated rows (budget {budget.get('share'):.0%})")
        if budget.get("reason"):
            parts.append(str(budget["reason"]))
    if cache is not None:
        parts.append(f"cache {cache}")
    return "; ".join(parts) or None


PER_LAYER_HEADERS = ("layer", "modules", "loss", "tokens", "damp", "fallbacks", "seconds")


def rotation_text(record: Any) -> str:
    """One line of a run's folded-rotation record (qhf's ``summary.rotation``): ``hadamard seed 0: residual 576
    (paley1 12 (q=11) x ...), heads 64 (sylvester 64); lm_head untied`` plus any part left out and why."""
    applied = [
        f"{part} {matrix['size']} ({matrix['construction']})" for part, matrix in (record.get("matrices") or {}).items()
    ]
    text = f"{record['kind']} seed {record['seed']}: " + (", ".join(applied) or "nothing applied")
    if record.get("untied_embeddings"):
        text += "; lm_head untied from the embedding"
    for part, reason in (record.get("refused") or {}).items():
        text += f"; {part} left out: {reason}"
    return text
