"""``lowbit convert PATH --to FORMAT --out DIR``: rewrite a quantized checkpoint in another layout.

Every quantized module goes through ``qformats.transcode.transcode`` (bit exact, verified round trip).
When the target cannot hold a module exactly, nothing is written and the error lists each such module
with the reason (what would be lost). With ``--allow-lossy`` those modules are dequantized and
requantized by round-to-nearest (``qalgos.quantize_rtn``, same bits, group size and symmetry, natural
group order) and the added error is reported per module; a module the target still cannot hold stops the
conversion. Dense tensors are copied unchanged (bfloat16 stays bfloat16), with the model's config and
tokenizer files; the quantization config is the source's with the new format.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import LossyConversionError, UsageError
from .report_tables import human_bytes, render_table

AWQ_FORMATS = ("gemm", "gemv", "gemv_fast", "llm-awq")
GPTQ_FORMATS = ("gptq", "gptq_v2", "gptq_p")
SIDE_FILES = ("generation_config.json",)
SHOWN_REFUSALS = 12


def target_config(source_cfg: Any, to: str, *, requantized: bool) -> dict[str, Any]:
    """The quantization config dict of the converted checkpoint (the source's, re-targeted to ``to``)."""
    from qformats.config import QuantizeConfig, config_to_dict
    from qformats.transcode import DEFAULT_PACK_DTYPES

    method = source_cfg.method if to in ("marlin", "awq_marlin") else ("awq" if to in AWQ_FORMATS else "gptq")
    meta = dict(source_cfg.meta)
    meta["converted_by"] = "lowbit convert" + (" (some modules requantized with rtn)" if requantized else "")
    cfg = QuantizeConfig(
        bits=source_cfg.bits,
        group_size=source_cfg.group_size,
        sym=source_cfg.sym,
        desc_act=bool(source_cfg.desc_act) and to in GPTQ_FORMATS,
        method=method,
        format=to,
        pack_dtype=DEFAULT_PACK_DTYPES.get(to, "int32"),
        lm_head=source_cfg.lm_head,
        dynamic=source_cfg.dynamic,
        meta=meta,
    )
    return config_to_dict(cfg)


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


def _plan(checkpoint: Any, to: str, allow_lossy: bool) -> tuple[dict[str, Any], list[tuple[str, str]], dict]:
    from qformats.errors import TranscodeError
    from qformats.transcode import transcode

    converted: dict[str, Any] = {}
    refused: list[tuple[str, str]] = []
    for entry in checkpoint.modules():
        try:
            converted[entry.prefix] = transcode(
                checkpoint.module_tensors(entry), from_=entry.layout, to=to, meta=entry.meta
            )
        except TranscodeError as exc:
            refused.append((entry.prefix, str(exc)))
    errors: dict[str, dict[str, Any]] = {}
    if refused and not allow_lossy:
        shown = [f"  {name}: {reason}" for name, reason in refused[:SHOWN_REFUSALS]]
        more = len(refused) - SHOWN_REFUSALS
        raise LossyConversionError(
            f"{len(refused)} of {len(checkpoint.modules())} module(s) cannot be stored in {to!r} exactly; "
            "converting would lose:\n"
            + "\n".join(shown)
            + (f"\n  ... and {more} more" if more > 0 else "")
            + "\nnothing was written; pass --allow-lossy to requantize these modules with round-to-nearest"
        )
    by_name = {e.prefix: e for e in checkpoint.modules()}
    for name, reason in refused:
        try:
            converted[name], errors[name] = _requantize(checkpoint.unpack(by_name[name]), to)
        except TranscodeError as exc:
            raise LossyConversionError(
                f"{name}: even requantized, {to!r} cannot hold it: {exc} (it was refused because: {reason})"
            ) from None
        errors[name]["reason"] = reason
    return converted, refused, errors


def _tensors(checkpoint: Any, converted: dict[str, Any], dtypes: dict[str, str]) -> Iterator[tuple[str, np.ndarray]]:
    for prefix, result in converted.items():
        for key, array in result.tensors.items():
            yield f"{prefix}.{key}", array
    for name in checkpoint.dense_names():
        if checkpoint.shape_of(name)[1] == "BF16":
            dtypes[name] = "BF16"
        yield name, checkpoint.load(name)


def run(args: argparse.Namespace) -> int:
    from qformats.checkpoint import open_checkpoint, write_checkpoint
    from qformats.config import read_config
    from qformats.transcode import SCALAR_LAYOUTS
    from qhf.tokenizer import TOKENIZER_FILES

    source, out = Path(args.path), Path(args.out)
    if args.to not in SCALAR_LAYOUTS:
        raise UsageError(f"--to: expected one of {', '.join(SCALAR_LAYOUTS)}, found {args.to!r}")
    if not source.is_dir():
        raise UsageError(f"convert: {args.path!r} is not a checkpoint directory")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {args.out}: exists and is not an empty directory; choose a new output directory")
    checkpoint = open_checkpoint(source)
    converted, refused, errors = _plan(checkpoint, args.to, args.allow_lossy)
    model_config = None
    if (source / "config.json").is_file():
        model_config = json.loads((source / "config.json").read_text(encoding="utf-8"))
        model_config.pop("quantization_config", None)
    dtypes: dict[str, str] = {}
    report = write_checkpoint(
        out,
        _tensors(checkpoint, converted, dtypes),
        quantize_config=target_config(read_config(source), args.to, requantized=bool(refused)),
        model_config=model_config,
        max_shard_size=args.max_shard_size,
        dtypes=dtypes,
    )
    for name in (*SIDE_FILES, *TOKENIZER_FILES):
        if (source / name).is_file():
            shutil.copyfile(source / name, out / name)
    exact = len(converted) - len(errors)
    print(f"converted    {source} ({checkpoint.fields.format}) -> {out} ({args.to})")
    print(f"modules      {exact} transcoded bit exactly, {len(errors)} requantized (lossy)")
    if errors:
        rows = [[n, e["max_abs_error"], e["relative_max_error"], e["reason"]] for n, e in errors.items()]
        print(render_table(("module", "max |error|", "relative", "why requantized"), rows))
    print(f"size         {human_bytes(report.total_size)} in {len(report.files)} file(s)")
    return 0
