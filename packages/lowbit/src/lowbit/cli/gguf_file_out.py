"""``--out x.gguf``: one llama.cpp .gguf file (any architecture qformats' writer covers) from
``lowbit convert DIR --to gguf-file`` or ``lowbit quantize``.

The work is qformats' (:func:`qformats.gguf_file.directory_export.export_directory`). ``quantize`` saves
its checkpoint into a temporary directory beside the output (``<out>.parts-<pid>``, removed afterwards),
then writes the file from it; a .gguf source's tokenizer metadata is carried across unchanged.
"""

from __future__ import annotations

import argparse
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from ..errors import UsageError
from .report_tables import human_bytes

GGUF_FILE_TARGET = "gguf-file"


def is_gguf_path(out: str) -> bool:
    return out.lower().endswith(".gguf")


def _check_out_file(out: str) -> Path:
    path = Path(out)
    if not is_gguf_path(out):
        raise UsageError(f"--out {out}: a .gguf file is written; expected a path ending in .gguf")
    if path.exists():
        raise UsageError(f"--out {out}: exists; choose a new .gguf path (an existing file is never overwritten)")
    if not path.parent.resolve().is_dir():
        raise UsageError(f"--out {out}: the folder {path.parent} does not exist")
    return path


def _print_report(report: object, out: Path) -> None:
    written = report.written  # type: ignore[attr-defined]
    types = ", ".join(f"{count} {kind}" for kind, count in sorted(written.types.items()))
    print(f"gguf file    {out.resolve()} ({human_bytes(written.nbytes)}; {written.architecture} architecture; "
          f"tensors: {types})")  # fmt: skip
    print(
        f"modules      {len(report.exact)} transcoded bit exactly, {len(report.carried)} gguf blocks carried, "  # type: ignore[attr-defined]
        f"{len(report.requantized)} requantized (lossy), {len(report.dense)} dense tensors"  # type: ignore[attr-defined]
    )
    if written.skipped:
        print(f"not written  {', '.join(written.skipped)} (tied to the token embedding)")
    for note in written.unused:
        print(f"not applied  {note}")
    from .engine_lines import engines_text, gguf_file_verdicts

    print(engines_text(gguf_file_verdicts(out)))
    print(f"result       {out.resolve()}")


def export(source: Path, out: Path, qtype: str, tokenizer_gguf: str | None, name: str) -> None:
    from qformats.gguf_file.directory_export import export_directory

    report = export_directory(source, out, qtype=qtype, tokenizer_gguf=tokenizer_gguf, name=name)
    _print_report(report, out)


def convert_to_gguf_file(args: argparse.Namespace) -> int:
    """``lowbit convert DIR --to gguf-file --out x.gguf [--gguf-type Q8_0]``."""
    source = Path(args.path)
    if not source.is_dir():
        raise UsageError(f"convert: {args.path!r} is not a checkpoint directory")
    out = _check_out_file(args.out)
    export(source, out, args.gguf_type, None, source.resolve().name)
    return 0


def quantize_to_gguf_file(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    """``lowbit quantize SOURCE ... --out x.gguf``: quantize into a temporary directory, then write the file."""
    out = _check_out_file(args.out)
    parts = out.with_name(f"{out.name}.parts-{os.getpid()}")
    args.out, args.gguf_file_out = str(parts), str(out)
    try:
        code = run(args)
        if code == 0:
            tokenizer = args.source if is_gguf_path(args.source) and Path(args.source).is_file() else None
            export(parts, out, args.gguf_type, tokenizer, out.stem)
        return code
    finally:
        from qformats.checkpoint.directory_lock import lock_path

        shutil.rmtree(parts, ignore_errors=True)
        lock_path(parts).unlink(missing_ok=True)  # the run is over: nothing holds the temporary directory's lock
