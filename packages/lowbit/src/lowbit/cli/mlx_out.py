"""``lowbit convert DIR --to mlx --out OUT``: a GPTQ/AWQ checkpoint as the model directory mlx_lm loads.

The work is qformats' (:func:`qformats.checkpoint.mlx_export.export_mlx`: every module exact or the whole
export refused with each module's rule; nothing is requantized, so ``--allow-lossy`` is refused with this
target). Afterwards the tokenizer files and ``generation_config.json`` are copied, as ``convert`` does.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from .report_tables import human_bytes

MLX_TARGET = "mlx"


def convert_to_mlx(args: argparse.Namespace, source: Path, out: Path, side_files: tuple[str, ...]) -> int:
    """Export ``source`` to ``out`` for mlx_lm and print what was written."""
    from qformats.checkpoint.mlx_export import export_mlx

    if args.allow_lossy:
        raise UsageError(
            "--allow-lossy: --to mlx never requantizes (each module is exact or the export is refused with its "
            "rule); quantize again with an MLX group size (32, 64, 128) and without --desc-act instead"
        )
    report = export_mlx(source, out, max_shard_size=args.max_shard_size, side_files=side_files)
    written = report.written
    quant = report.quantization
    overrides = sum(isinstance(v, dict) for v in quant.values())
    print(f"converted    {source} -> {out} (mlx)")
    print(
        f"modules      {len(report.modules)} transcoded exactly to MLX affine (codes and scales bit exact, "
        f"biases = -scales * zeros), {len(report.regrouped)} regrouped, {report.dense} dense tensors"
    )
    print(
        f"quantization group_size {quant['group_size']}, bits {quant['bits']}, mode affine"
        + (f"; {overrides} module(s) with their own entry" if overrides else "")
    )
    for name, (_, run, group) in list(report.regrouped.items())[:3]:
        print(f"regrouped    {name}: group {group} stored as MLX groups of {run} (its scale repeated, exact)")
    if written is not None:
        print(f"size         {human_bytes(written.total_size)} in {len(written.files)} file(s)")
    return 0
