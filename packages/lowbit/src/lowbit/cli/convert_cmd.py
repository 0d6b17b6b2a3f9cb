"""``lowbit convert PATH --to FORMAT --out DIR``: rewrite a quantized checkpoint in another layout.

The exact path is ``qformats.checkpoint.transcode_checkpoint`` (every module bit exact, verified round trip;
QQQ and ParoQuant take part where they are exactly a scalar weight, see ``qformats.family_transcode``).
When the target cannot hold a module exactly, nothing is written and the error lists each such module
with the reason (what would be lost). With ``--allow-lossy`` those modules are dequantized and
requantized by round-to-nearest (``qalgos.quantize_rtn``, same bits, group size and symmetry, natural
group order) and the added error is reported per module; a module the target still cannot hold stops the
conversion. Dense tensors pass through, the model's config, tokenizer and generation config are copied into
the staging directory and published with the weights (a crash never leaves an output without them);
the quantization config is rewritten for the target by qformats. ``--to mlx`` writes the directory mlx_lm
loads (:mod:`.mlx_out`); ``--to gguf-file`` one llama.cpp file (:mod:`.gguf_file_out`).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LossyConversionError, UsageError
from .gguf_file_out import GGUF_FILE_TARGET, convert_to_gguf_file
from .mlx_out import MLX_TARGET, convert_to_mlx
from .report_tables import human_bytes, render_table

SIDE_FILES = ("generation_config.json",)
SHOWN_REFUSALS = 12


def lossy_config(source: Path, checkpoint: Any, to: str) -> dict[str, Any]:
    """qformats' target config for ``to``, marked as partly requantized (natural group order: no act-order)."""
    from qformats.checkpoint.config_files import find_quant_config
    from qformats.checkpoint.transcode_dir import target_config

    _, raw = find_quant_config(source)
    config = target_config(raw, to, bool(checkpoint.fields.sym))
    if to not in ("gptq", "gptq_v2", "gptq_p"):
        config["desc_act"] = False
    stated = config.get("meta")
    meta: dict[str, Any] = dict(stated) if isinstance(stated, dict) else {}
    meta["converted_by"] = "lowbit convert --allow-lossy (modules the target could not hold requantized with rtn)"
    config["meta"] = meta
    return config


def _requantize(weight: Any, to: str) -> tuple[Any, dict[str, Any]]:
    """RTN requantization of ``weight`` (logical) for layout ``to``; returns the packed result and its error."""
    import torch
    from qalgos import QuantSpec, quantize_rtn
    from qformats.transcode import transcode_weight

    dense = weight.dequantize()
    spec = QuantSpec(bits=int(weight.bits), group_size=int(weight.group_size), sym=bool(weight.sym))
    result = quantize_rtn(torch.from_numpy(dense), spec)
    packed = transcode_weight(result.weight, to)
    delta = np.abs(result.weight.dequantize() - dense)
    scale = float(np.abs(dense).max()) or 1.0
    return packed, {"max_abs_error": float(delta.max()), "relative_max_error": float(delta.max()) / scale}


def refusals(checkpoint: Any, to: str) -> list[tuple[str, str]]:
    """``(module, reason)`` for every module layout ``to`` cannot hold exactly."""
    from qformats.errors import TranscodeError
    from qformats.transcode import transcode

    refused = []
    for entry in checkpoint.modules():
        try:
            transcode(checkpoint.module_tensors(entry), from_=entry.layout, to=to, meta=entry.meta)
        except TranscodeError as exc:
            refused.append((entry.prefix, str(exc)))
    return refused


def _refusal_message(refused: list[tuple[str, str]], total: int, to: str) -> str:
    shown = [f"  {name}: {reason}" for name, reason in refused[:SHOWN_REFUSALS]]
    more = len(refused) - SHOWN_REFUSALS
    return (
        f"{len(refused)} of {total} module(s) cannot be stored in {to!r} exactly; converting would lose:\n"
        + "\n".join(shown)
        + (f"\n  ... and {more} more" if more > 0 else "")
        + "\nnothing was written; pass --allow-lossy to requantize these modules with round-to-nearest"
    )


def _lossy_modules(
    checkpoint: Any, to: str, refused: list[tuple[str, str]]
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Every module in layout ``to``: transcoded when possible, else requantized (with its added error)."""
    from qformats.errors import CheckpointFormatError, TranscodeError
    from qformats.transcode import transcode

    reasons = dict(refused)
    converted: dict[str, Any] = {}
    errors: dict[str, dict[str, Any]] = {}
    for entry in checkpoint.modules():
        if entry.prefix not in reasons:
            converted[entry.prefix] = transcode(
                checkpoint.module_tensors(entry), from_=entry.layout, to=to, meta=entry.meta
            )
            continue
        try:
            converted[entry.prefix], errors[entry.prefix] = _requantize(checkpoint.unpack(entry), to)
        except (TranscodeError, CheckpointFormatError) as exc:  # VPTQ / EXL3: no scalar weight to requantize
            raise LossyConversionError(
                f"{entry.prefix}: even requantized, {to!r} cannot hold it: {exc} "
                f"(it was refused because: {reasons[entry.prefix]})"
            ) from None
        errors[entry.prefix]["reason"] = reasons[entry.prefix]
    return converted, errors


def _tensors(checkpoint: Any, converted: dict[str, Any]) -> Iterator[tuple[str, np.ndarray]]:
    for prefix, result in converted.items():
        for key, array in result.tensors.items():
            yield f"{prefix}.{key}", array
    for name in checkpoint.dense_names():
        yield name, checkpoint.load(name)


def run(args: argparse.Namespace) -> int:
    from qformats.checkpoint import open_checkpoint, transcode_checkpoint, write_checkpoint
    from qformats.checkpoint.dequantize import model_config_without_quantization
    from qformats.errors import TranscodeError
    from qformats.transcode import TRANSCODE_LAYOUTS
    from qhf.tokenizer import TOKENIZER_FILES

    if args.to == GGUF_FILE_TARGET:
        return convert_to_gguf_file(args)
    source, out = Path(args.path), Path(args.out)
    if args.to not in (*TRANSCODE_LAYOUTS, MLX_TARGET):
        raise UsageError(
            f"--to: expected one of {', '.join(TRANSCODE_LAYOUTS)}, {MLX_TARGET} or {GGUF_FILE_TARGET}, "
            f"found {args.to!r}"
        )
    if source.is_file() and source.suffix == ".gguf":
        raise UsageError(
            f"convert: {args.path!r} is a .gguf file, a dense source rather than a checkpoint directory; quantize it "
            "with `lowbit quantize` (which reads it), then convert the resulting directory"
        )
    if not source.is_dir():
        raise UsageError(f"convert: {args.path!r} is not a checkpoint directory")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {args.out}: exists and is not an empty directory; choose a new output directory")
    checkpoint = open_checkpoint(source)
    checkpoint.require_valid()  # the rules inspect reports, refused by name before anything is written
    if args.to == MLX_TARGET:
        return convert_to_mlx(args, source, out, (*SIDE_FILES, *TOKENIZER_FILES))
    errors: dict[str, dict[str, Any]] = {}
    try:  # the exact path is qformats' own directory transcoder (nothing is written when a module is refused)
        report = transcode_checkpoint(
            source, out, to=args.to, max_shard_size=args.max_shard_size, side_files=(*SIDE_FILES, *TOKENIZER_FILES)
        )
    except TranscodeError:
        refused = refusals(checkpoint, args.to)
        if not refused:
            raise
        if not args.allow_lossy:
            raise LossyConversionError(_refusal_message(refused, len(checkpoint.modules()), args.to)) from None
        converted, errors = _lossy_modules(checkpoint, args.to, refused)
        # bfloat16 dense tensors are read as float32 and written back as BF16 (decided before writing starts)
        dtypes = {n: "BF16" for n in checkpoint.dense_names() if checkpoint.stored_dtype(n) == "BF16"}
        report = write_checkpoint(
            out,
            _tensors(checkpoint, converted),
            quantize_config=lossy_config(source, checkpoint, args.to),
            model_config=model_config_without_quantization(source),
            max_shard_size=args.max_shard_size,
            dtypes=dtypes,
            side_files=(source, (*SIDE_FILES, *TOKENIZER_FILES)),
        )
    total = len(checkpoint.modules())
    print(f"converted    {source} ({checkpoint.fields.format}) -> {out} ({args.to})")
    print(f"modules      {total - len(errors)} transcoded bit exactly, {len(errors)} requantized (lossy)")
    if errors:
        rows = [[n, e["max_abs_error"], e["relative_max_error"], e["reason"]] for n, e in errors.items()]
        print(render_table(("module", "max |error|", "relative", "why requantized"), rows))
    print(f"size         {human_bytes(report.total_size)} in {len(report.files)} file(s)")
    return 0
