"""A lowbit GPTQ/AWQ checkpoint directory -> the safetensors and ``config.json`` that mlx_lm loads.

Every quantized module (any registry layout: GPTQ v1/v2/planar, AWQ GEMM/GEMV/GEMV-fast/llm-awq, Marlin)
is unpacked to its logical weight and re-laid as MLX affine ``<module>.weight`` (uint32 words) /
``.scales`` / ``.biases`` by :func:`qformats.layouts.mlx.to_mlx`: codes and scales carried over exactly,
``biases = -scales * zeros`` rounded once to the scale dtype, the MLX group the largest contiguous run
(128/64/32) inside one source group. Dense tensors (embeddings, norms, module biases, an unquantized
``lm_head``) pass through in their dtype (bfloat16 kept). Nothing is requantized: a module MLX cannot hold
(act-order ``g_idx``, groups under 32, 7-bit codes, ...) stops the export before anything is written,
and the error lists every such module with its rule (:func:`mlx_refusals`). Weight-only directories
(FP8, bitsandbytes, GGUF blocks) and QQQ / ParoQuant / VPTQ / EXL3 directories are refused by name.

``config.json`` is the model's config without ``quantization_config``, plus mlx_lm's
``"quantization": {"group_size", "bits", "mode": "affine"}`` (the most common pair) with one entry per
module whose pair differs (mlx_lm reads ``config["quantization"][module path]`` before quantizing the
model), mirrored under ``"quantization_config"`` as mlx_lm's own ``save_config`` writes it. Shards are
``model.safetensors`` / ``model-0000i-of-0000N.safetensors`` (the names mlx_lm globs), written atomically
by :func:`~qformats.checkpoint.writer.write_checkpoint`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import CheckpointFormatError, LayoutError, TranscodeError
from ..layouts.mlx import MLX_BITS, MLX_GROUP_SIZES, mlx_group_size, mlx_refusal, to_mlx
from ..logical import QuantizedWeight, default_g_idx, group_count
from .dequantize import model_config_without_quantization
from .family_modules import is_family
from .modules import ModuleEntry
from .reader import Checkpoint, open_checkpoint
from .streaming import stream_converted
from .weight_only_modules import is_weight_only
from .writer import WriteReport, write_checkpoint

SHOWN_REFUSALS = 12


@dataclass
class MLXExportReport:
    """What the export wrote: module prefix -> ``(bits, MLX group size, source group size)``, the config's
    ``quantization`` block, the dense tensor count and the files."""

    modules: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    quantization: dict[str, object] = field(default_factory=dict)
    dense: int = 0
    written: WriteReport | None = None

    @property
    def regrouped(self) -> dict[str, tuple[int, int, int]]:
        """Modules whose MLX group differs from the source group (scales repeated over the runs, exact)."""
        return {name: spec for name, spec in self.modules.items() if spec[1] != spec[2]}


class MLXExportError(CheckpointFormatError):
    """Modules MLX cannot hold exactly (nothing was written); ``refused`` lists ``(module, rule)``."""

    def __init__(self, message: str, refused: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.refused = refused


def _g_idx_only(ck: Checkpoint, entry: ModuleEntry) -> QuantizedWeight:
    """A stand-in weight with the module's real bits, dims and ``g_idx`` (codes, scales, zeros all zero)."""
    meta = entry.meta
    groups = group_count(meta.in_features, meta.group_size)
    g_idx = ck.load(entry.tensors["g_idx"]).astype(np.int64) if "g_idx" in entry.tensors else None
    if g_idx is None or g_idx.shape != (meta.in_features,):
        g_idx = default_g_idx(meta.in_features, meta.group_size)
    g_idx = np.where(g_idx < 0, g_idx + groups, g_idx)  # negative entries count from the end, as layouts read them
    return QuantizedWeight(
        codes=np.broadcast_to(np.zeros((), np.uint8), (meta.out_features, meta.in_features)),
        scales=np.ones((groups, meta.out_features), np.float16),
        zeros=np.zeros((groups, meta.out_features), np.int32),
        g_idx=g_idx.astype(np.int32),
        bits=meta.bits,
        group_size=meta.group_size,
        sym=meta.sym,
    )


def mlx_refusals(ck: Checkpoint) -> list[tuple[str, str]]:
    """``(module, rule)`` for every module MLX affine cannot hold exactly (reads only the ``g_idx`` tensors)."""
    refused = []
    for entry in ck.modules():
        if is_family(entry.layout):
            refused.append((entry.prefix, f"{entry.layout} module: the MLX export reads GPTQ/AWQ-family layouts"))
            continue
        try:
            why = mlx_refusal(_g_idx_only(ck, entry))
        except LayoutError as exc:
            why = f"unreadable g_idx: {exc}"
        if why is not None:
            refused.append((entry.prefix, why))
    return refused


def refusal_message(source: Path, refused: list[tuple[str, str]], total: int) -> str:
    """The one error of a refused export: how many modules, each (up to a dozen) with its rule."""
    shown = [f"  {name}: {why}" for name, why in refused[:SHOWN_REFUSALS]]
    more = len(refused) - SHOWN_REFUSALS
    return (
        f"{source}: {len(refused)} of {total} module(s) cannot be stored as MLX affine weights exactly:\n"
        + "\n".join(shown)
        + (f"\n  ... and {more} more" if more > 0 else "")
        + f"\nMLX stores {'/'.join(map(str, MLX_BITS))}-bit codes in contiguous groups of "
        + f"{'/'.join(map(str, MLX_GROUP_SIZES))} input columns; nothing was written"
    )


def _scale_dtype(ck: Checkpoint, entry: ModuleEntry) -> str | None:
    """``"bfloat16"`` when the module's ``scales`` tensor is stored as BF16, else None (keep the read dtype)."""
    name = entry.tensors.get("scales")
    if name is None:
        return None
    return "bfloat16" if ck.files[ck.weight_map[name]].tensors[name].dtype == "BF16" else None


def _quantization(modules: dict[str, tuple[int, int, int]]) -> dict[str, object]:
    """mlx_lm's ``quantization`` block: the most common ``(bits, group)`` plus an entry per module that differs."""
    pairs = Counter((bits, group) for bits, group, _ in modules.values())
    (bits, group), _ = pairs.most_common(1)[0]
    block: dict[str, object] = {"group_size": group, "bits": bits, "mode": "affine"}
    for name, (b, g, _) in modules.items():
        if (b, g) != (bits, group):
            block[name] = {"group_size": g, "bits": b, "mode": "affine"}
    return block


def _check_source(ck: Checkpoint, source: Path) -> None:
    if is_weight_only(ck):
        raise CheckpointFormatError(
            f"{source}: quantization method {ck.fields.method!r}: the MLX export reads GPTQ/AWQ integer "
            "checkpoints (codes, scales, zeros), not weight-only families"
        )
    if not ck.modules():
        raise CheckpointFormatError(f"{source}: no quantized module (no qweight tensors) to export to MLX")
    refused = mlx_refusals(ck)
    if refused:
        raise MLXExportError(refusal_message(source, refused, len(ck.modules())), refused)


def export_mlx(
    source: str | Path, target: str | Path, *, max_shard_size: int | str = "4GB", side_files: Iterable[str] = ()
) -> MLXExportReport:
    """Write checkpoint ``source`` as an mlx_lm model directory ``target`` (atomic; see the module docstring);
    the ``side_files`` present in ``source`` (tokenizer ...) are published with it.

    Raises :class:`MLXExportError` listing every module MLX cannot hold (nothing written), or
    :class:`CheckpointFormatError` for a source that is not a GPTQ/AWQ checkpoint.
    """
    root = Path(source)
    ck = open_checkpoint(root)
    _check_source(ck, root)
    report = MLXExportReport()
    dtypes: dict[str, str] = {}
    entries = {entry.prefix: entry for entry in ck.modules()}
    for entry in entries.values():
        if _scale_dtype(ck, entry) == "bfloat16":
            dtypes.update({f"{entry.prefix}.scales": "BF16", f"{entry.prefix}.biases": "BF16"})
    for name in ck.dense_names():
        if ck.stored_dtype(name) == "BF16":
            dtypes[name] = "BF16"
    report.dense = len(ck.dense_names())
    for entry in entries.values():
        run = mlx_group_size(_g_idx_only(ck, entry))
        report.modules[entry.prefix] = (entry.meta.bits, run, entry.meta.group_size)
    report.quantization = _quantization(report.modules)
    config = dict(model_config_without_quantization(root) or {})
    config["quantization"] = report.quantization
    config["quantization_config"] = report.quantization

    def relaid(entry: ModuleEntry, tensors: dict[str, np.ndarray]) -> Iterator[tuple[str, np.ndarray]]:
        try:
            mlx = to_mlx(ck.unpack(entry, tensors), scale_dtype=_scale_dtype(ck, entry))
        except TranscodeError as exc:
            raise TranscodeError(f"module {entry.prefix!r}: {exc}") from None
        if mlx.group_size != report.modules[entry.prefix][1]:
            raise TranscodeError(f"module {entry.prefix!r}: its g_idx tensor and its unpacked weight disagree")
        for suffix, array in mlx.tensors().items():
            yield f"{entry.prefix}.{suffix}", array

    report.written = write_checkpoint(
        target,
        stream_converted(ck, relaid),
        quantize_config=None,
        model_config=config,
        max_shard_size=max_shard_size,
        dtypes=dtypes,
        side_files=(root, tuple(side_files)),
    )
    return report
