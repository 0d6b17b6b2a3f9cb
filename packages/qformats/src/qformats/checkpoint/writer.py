"""Writing a checkpoint directory: size-bounded shards, the index, metadata and both config files.

:func:`write_checkpoint` streams ``(name, array)`` pairs into shards of at most ``max_shard_size``
bytes (a tensor larger than the limit gets a shard of its own; a module's tensors may land in different
shards), names them ``model-0000i-of-0000N.safetensors`` (or ``model.safetensors`` when one suffices),
writes ``model.safetensors.index.json`` (``metadata.total_size`` and a sorted ``weight_map``),
``quantize_config.json`` and ``config.json`` with the same dict under ``quantization_config``.

Every shard records each tensor's crc32 in its ``__metadata__`` (``qformats.crc32``; readers verify it
on load). Everything is first written (each file fsynced) into a sibling staging directory; when ``validate`` is
set the result is opened with the reader and every module validated. Only then is the staging directory
swapped in for the target (:mod:`qformats.checkpoint.publish`: one atomic exchange, so a crash at any
point leaves the old complete checkpoint or the new one; old shards and index do not survive, other
files of the old target are kept). On any failure the staging directory is deleted and the target is
left exactly as it was. The output directory's lock is held for the write.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import CheckpointFormatError
from .config_files import read_quant_fields
from .durable_files import write_file_durable
from .fault_points import reach
from .publish import staged_directory
from .reader import INDEX_NAME, Checkpoint
from .shard_size import parse_shard_size
from .side_files import copy_side_files
from .streamed_shard import StreamedShard


@dataclass
class WriteReport:
    """What a write produced: file names (in the target), tensor bytes and tensor count."""

    files: list[str] = field(default_factory=list)
    total_size: int = 0
    tensors: int = 0


def _tensor_bytes(arr: np.ndarray, dtypes: Mapping[str, str], name: str) -> int:
    """Stored bytes of ``arr`` (float32 written as bfloat16 takes two bytes an element)."""
    return arr.size * 2 if dtypes.get(name) == "BF16" else arr.nbytes


def _pairs(tensors: Iterable[tuple[str, np.ndarray]] | Mapping[str, np.ndarray]) -> Iterable[tuple[str, np.ndarray]]:
    return tensors.items() if isinstance(tensors, Mapping) else tensors


def _write_shards(
    tmp: Path,
    tensors: Iterable[tuple[str, np.ndarray]],
    limit: int,
    metadata: dict[str, str],
    dtypes: Mapping[str, str],
) -> tuple[list[tuple[str, list[str]]], int]:
    """Write numbered temp shards; returns ``[(temp file, names)]`` and the total tensor bytes."""
    shards: list[tuple[str, list[str]]] = []
    seen: set[str] = set()
    current: StreamedShard | None = None
    total = 0

    def flush() -> None:
        nonlocal current
        if current is not None:
            if current.entries:
                current.finish()
                shards.append((current.path.name, current.names))
            else:
                current.abort()
        current = None

    try:
        for name, value in tensors:
            if name in seen:
                raise CheckpointFormatError(f"duplicate tensor name {name!r} in the tensors to write")
            seen.add(name)
            arr = np.asarray(value)
            size = _tensor_bytes(arr, dtypes, name)
            if current is not None and current.entries and current.size + size > limit:
                flush()
            if current is None:
                current = StreamedShard(tmp / f"shard-{len(shards):05d}.safetensors", metadata, dtypes, checksums=True)
            current.add(name, arr)
            del arr, value  # the shard holds the bytes on disk, not the array
            total += size
        flush()
    finally:
        if current is not None:
            current.abort()
    return shards, total


def write_checkpoint(
    directory: str | Path,
    tensors: Iterable[tuple[str, np.ndarray]] | Mapping[str, np.ndarray],
    *,
    quantize_config: Mapping[str, object] | None,
    model_config: Mapping[str, object] | None = None,
    max_shard_size: int | str = "4GB",
    metadata: Mapping[str, object] | None = None,
    dtypes: Mapping[str, str] | None = None,
    validate: bool = True,
    side_files: tuple[Path, Iterable[str]] | None = None,
) -> WriteReport:
    """Write a (quantized or dense) checkpoint atomically; see the module docstring.

    ``quantize_config`` ``None`` writes a dense checkpoint (``config.json`` only when ``model_config``
    is given). ``dtypes`` maps tensor names to ``"BF16"`` to store float32 arrays as bfloat16, or to
    ``"F8_E4M3"`` / ``"F8_E5M2"`` to store uint8 FP8 bit patterns under that dtype. ``side_files``
    ``(source directory, names)``: files copied from the source into the staging directory, so they are
    published with the weights (:mod:`.side_files`).
    """
    with staged_directory(directory) as staging:
        report = write_checkpoint_files(
            staging,
            tensors,
            quantize_config=quantize_config,
            model_config=model_config,
            max_shard_size=max_shard_size,
            metadata=metadata,
            dtypes=dtypes,
            validate=validate,
        )
        if side_files is not None:
            report.files.extend(copy_side_files(Path(side_files[0]), side_files[1], staging, Path(directory)))
        return report


def write_checkpoint_files(
    staging: str | Path,
    tensors: Iterable[tuple[str, np.ndarray]] | Mapping[str, np.ndarray],
    *,
    quantize_config: Mapping[str, object] | None,
    model_config: Mapping[str, object] | None = None,
    max_shard_size: int | str = "4GB",
    metadata: Mapping[str, object] | None = None,
    dtypes: Mapping[str, str] | None = None,
    validate: bool = True,
) -> WriteReport:
    """Write the checkpoint files into the empty directory ``staging`` and verify them; no publishing.

    For callers that add files of their own before publishing with
    :func:`qformats.checkpoint.publish.staged_directory`; :func:`write_checkpoint` does both.
    """
    tmp = Path(staging)
    limit = parse_shard_size(max_shard_size)
    st_meta = {str(k): str(v) for k, v in (metadata or {}).items()}
    st_meta["format"] = "pt"
    shards, total = _write_shards(tmp, _pairs(tensors), limit, st_meta, dtypes or {})
    report = WriteReport(total_size=total, tensors=sum(len(names) for _, names in shards))
    final = _final_names(len(shards))
    weight_map: dict[str, str] = {}
    for (temp_name, names), final_name in zip(shards, final, strict=True):
        (tmp / temp_name).rename(tmp / final_name)
        reach("stage.shard_named")
        weight_map.update(dict.fromkeys(names, final_name))
    report.files = list(final)
    if len(shards) > 1:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        write_file_durable(tmp / INDEX_NAME, _json_bytes(index, sort_keys=True))
        report.files.append(INDEX_NAME)
    report.files.extend(_write_configs(tmp, quantize_config, model_config))
    if validate and quantize_config is not None:
        _validate_written(tmp, quantize_config)
    return report


def _json_bytes(data: object, *, sort_keys: bool = False) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=sort_keys) + "\n").encode("utf-8")


def _final_names(count: int) -> list[str]:
    if count <= 1:
        return ["model.safetensors"][:count] or []
    return [f"model-{i + 1:05d}-of-{count:05d}.safetensors" for i in range(count)]


def _write_configs(
    tmp: Path, quantize_config: Mapping[str, object] | None, model_config: Mapping[str, object] | None
) -> list[str]:
    written = []
    if quantize_config is not None:
        write_file_durable(tmp / "quantize_config.json", _json_bytes(dict(quantize_config)))
        written.append("quantize_config.json")
    if model_config is not None or quantize_config is not None:
        cfg = dict(model_config or {})
        if quantize_config is not None:
            cfg["quantization_config"] = dict(quantize_config)
        write_file_durable(tmp / "config.json", _json_bytes(cfg))
        written.append("config.json")
    return written


def _validate_written(tmp: Path, quantize_config: Mapping[str, object]) -> None:
    fields = read_quant_fields(dict(quantize_config), source_file="quantize_config.json")
    checkpoint = Checkpoint(tmp, fields=fields)
    problems = checkpoint.validate()
    if problems:
        lines = "; ".join(f"{prefix}: " + ", ".join(str(v) for v in found) for prefix, found in problems.items())
        raise CheckpointFormatError(f"refusing to write a checkpoint whose modules break their layout: {lines}")
