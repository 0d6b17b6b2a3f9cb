"""``lowbit inspect PATH [--json] [--plot PNG]``: what a checkpoint directory or a .gguf file holds.

Directories are summarized by ``qformats.inspect`` (method, format, layout, zero-point convention, every
module and its violations); ``.gguf`` files by ``qformats.gguf_file.GGUFReader`` (metadata, tensor count
and bytes per ggml type) and ``read_gguf`` (the Hugging Face class it reads as, or why it reads as
none). ``--plot`` draws codes and scales histograms of the first ``--plot-modules``
quantized modules of a directory. Exit status 1 when a directory has layout violations.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .report_tables import human_bytes, render_table

METADATA_KEYS = ("general.architecture", "general.name", "general.file_type", "general.quantization_version")


def gguf_summary(path: Path) -> dict[str, Any]:
    """Metadata and per-ggml-type tensor counts and bytes of a .gguf file."""
    from qformats.gguf_file import GGUFFileError, GGUFReader, read_gguf

    reader = GGUFReader(path)
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for info in reader.tensors.values():
        kind = getattr(info.type, "name", str(info.type))
        counts[kind] += 1
        sizes[kind] += int(info.nbytes)
    arch = reader.value("general.architecture")
    context = reader.value(f"{arch}.context_length") if arch else None
    try:  # what qhf would open it as (qformats' architecture table), or why it cannot
        dense = read_gguf(path)
        reads_as: dict[str, Any] = {"model_type": dense.config["model_type"], "class": dense.config["architectures"][0]}
    except GGUFFileError as exc:
        reads_as = {"error": str(exc)}
    return {
        "path": str(path),
        "version": reader.version,
        "metadata": {k: _jsonable(reader.value(k)) for k in METADATA_KEYS if reader.value(k) is not None},
        "context_length": _jsonable(context),
        "hugging_face": reads_as,
        "metadata_keys": len(reader.metadata),
        "tensors": len(reader.tensors),
        "types": {k: {"tensors": counts[k], "bytes": sizes[k]} for k in sorted(counts)},
        "file_size": path.stat().st_size,
    }


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _gguf_text(summary: dict[str, Any]) -> str:
    lines = [f"gguf file    {summary['path']} (version {summary['version']}, {human_bytes(summary['file_size'])})"]
    lines.extend(f"{key:<28} {value}" for key, value in summary["metadata"].items())
    reads_as = summary["hugging_face"]
    if "error" in reads_as:
        lines.append(f"reads as     no Hugging Face model: {reads_as['error']}")
    else:
        lines.append(f"reads as     {reads_as['class']} (model_type {reads_as['model_type']}; dense float32 source)")
    lines.append(f"tensors      {summary['tensors']}    metadata keys {summary['metadata_keys']}")
    rows = [[k, v["tensors"], human_bytes(v["bytes"])] for k, v in summary["types"].items()]
    lines.append(render_table(("ggml type", "tensors", "bytes"), rows))
    return "\n".join(lines)


def _plot_directory(path: Path, png: Path, count: int) -> Path:
    from qformats.checkpoint import open_checkpoint

    from .plots import plot_code_histograms

    checkpoint = open_checkpoint(path)
    drawn = []
    for entry in checkpoint.modules()[:count]:
        weight = checkpoint.unpack(entry)
        drawn.append((entry.prefix, weight.codes, weight.scales, int(weight.bits)))
    return plot_code_histograms(drawn, png, f"{path.name}: codes and scales of {len(drawn)} module(s)")


def run(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if not path.exists():
        raise UsageError(f"inspect: {str(path)!r} does not exist (expected a checkpoint directory or a .gguf file)")
    png = None
    if args.plot is not None:
        from .plots import check_png_path, require_matplotlib

        require_matplotlib("--plot")
        png = check_png_path(args.plot, "--plot")
    if path.is_file():
        if path.suffix != ".gguf":
            raise UsageError(f"inspect: {path} is a file but not a .gguf; give a checkpoint directory or a .gguf")
        if png is not None:
            raise UsageError("--plot draws quantized checkpoint directories; for a .gguf use the text summary")
        from .engine_lines import engines_text, gguf_file_verdicts

        summary = gguf_summary(path)
        verdicts = gguf_file_verdicts(path)
        summary["engines"] = [v.to_dict() for v in verdicts]
        print(json.dumps(summary, indent=2) if args.json else _gguf_text(summary) + "\n" + engines_text(verdicts))
        return 0
    from qformats.inspect import format_text, inspect

    from .engine_lines import directory_verdicts, engines_text

    result = inspect(path)
    verdicts = directory_verdicts(path, result)
    if png is not None:  # drawn before printing, so a closed stdout (`| head`) cannot skip it
        _plot_directory(path, png, args.plot_modules)
    if args.json:
        print(json.dumps({**result.to_dict(), "engines": [v.to_dict() for v in verdicts]}, indent=2))
    else:
        print(format_text(result))
        print(engines_text(verdicts))
    if png is not None and not args.json:
        print(f"plot         {png}")
    return 1 if result.violation_count else 0
