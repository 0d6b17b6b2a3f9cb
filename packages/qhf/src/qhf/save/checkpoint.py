"""Writing a quantized checkpoint directory.

Contents: weight shards (+ index), ``config.json`` with ``quantization_config``, ``quantize_config.json``
(the same dict), ``generation_config.json`` and tokenizer files carried over from the source, and the
per-module report (``quant_log.csv`` and ``quant_report.json``). Quantized modules are written with the
layout tensors the loop packed (qlooper ``FinalizedModule.tensors()``, read from the spill file one module at a
time when a streaming run spilled them) under ``<module>.<tensor>``; every other tensor is taken from the
in-memory model when materialized there (AWQ may have rescaled norms), else from a streaming run's spill area
(:mod:`qhf.spill`), else from the source file; a dense transformers ``Conv1D``'s weight (a linear of the skeleton,
:mod:`qhf.architectures.conv1d`) is written back in the files' ``[in, out]`` layout. Either way the same
tensors go to the writer in the same order, so a streaming run's checkpoint is byte-identical to the in-memory one.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from ..architectures.conv1d import conv1d_weights, skeleton_layout
from ..checkpoint_config import checkpoint_dict
from ..config_view import adapter as eora_adapter
from ..config_view import is_weight_only
from ..errors import SourceFormatError
from ..live_tensors import live_tensor
from ..results import QuantizedModules
from ..source.opened_source import OpenedSource
from ..spill import SpillArea, SpilledTensor
from ..summary import QuantizeSummary
from ..weight_only import fp8_storage_dtypes
from .quant_log import REPORT_COLUMNS, log_rows
from .tensor_stream import TensorEntry, TensorLoader, bf16_names, numpy_stream, write_atomic_json

if TYPE_CHECKING:
    from qformats.config import QuantizeConfig
    from qlooper.finalize import FinalizedModule
    from qlooper.report import ModuleReport

_CONFIG_DROP = ("_attn_implementation", "_attn_implementation_autoset", "attn_implementation")


def packed_tensors(results: QuantizedModules) -> dict[str, dict[str, np.ndarray]]:
    """Module name -> its layout tensors as the loop packed them (``qweight``, ``qzeros``, ``scales``,
    ``g_idx`` ...; a weight-only method's own, e.g. FP8 ``weight`` + ``weight_scale_inv``); every module's
    tensors at once (spilled ones read back): :func:`save_checkpoint` streams them instead."""
    return {name: result.tensors() for name, result in results.items()}


def _module_tensor(result: FinalizedModule, key: str) -> np.ndarray:
    """Layout tensor ``key`` of a finished module (a loader called at write time; re-read when spilled)."""
    return result.tensors()[key]


def _spilled_as(spill: SpillArea, name: str, dtype: torch.dtype) -> torch.Tensor:
    """The spilled tensor ``name`` in ``dtype`` (a loader called at write time)."""
    value = spill.dense(name)
    if value is None:
        raise SourceFormatError(f"spill area {spill.root}: tensor {name!r} is not there")
    return value.to(dtype)


def _detached_as(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor`` detached, in ``dtype`` (a loader called at write time)."""
    return tensor.detach().to(dtype)


def _stored_as(source: OpenedSource, name: str, dtype: torch.dtype) -> torch.Tensor:
    """The source file's tensor ``name`` in ``dtype`` (a loader called at write time)."""
    return source.stored(name).to(dtype)


def _file_layout(name: str, load: TensorLoader, transposed: frozenset[str]) -> torch.Tensor:
    """The tensor ``load()`` gives (skeleton layout) in the files' layout (a loader called at write time)."""
    value = load()
    return skeleton_layout(name, value if isinstance(value, torch.Tensor) else torch.from_numpy(value), transposed)


def _held_entry(
    source: OpenedSource,
    name: str,
    dense_dtype: torch.dtype | None,
    live: torch.Tensor | None,
    spill: SpillArea | None,
    spilled: SpilledTensor | None,
) -> TensorEntry:
    """The entry of a tensor held in memory (``live``) or in the spill area (``spilled``), in ``dense_dtype``
    when floating (None: its stored dtype)."""
    if live is not None:
        held, numel, load = live.dtype, live.numel(), partial(_detached_as, live)
    elif spill is not None and spilled is not None:
        held, numel, load = spilled.dtype, spilled.numel, partial(_spilled_as, spill, name)
    else:
        raise SourceFormatError(f"tensor {name!r}: neither in memory nor spilled")
    dtype = (dense_dtype or source.stored_dtype(name)) if held.is_floating_point else held
    size = numel * torch.empty((), dtype=dtype).element_size()
    return TensorEntry(name, size, partial(load, dtype), dtype == torch.bfloat16)


def tensor_entries(
    source: OpenedSource,
    model: nn.Module,
    results: QuantizedModules,
    dense_dtype: torch.dtype | None = None,
    spill: SpillArea | None = None,
) -> list[TensorEntry]:
    """Every tensor of the checkpoint, in the source's (sorted) name order, with lazy loaders.

    ``dense_dtype``: the dtype of every floating non-quantized tensor (None: each one's stored dtype).
    ``spill``: a streaming run's spill area, read for tensors of released layers.
    """
    entries: list[TensorEntry] = []
    transposed = conv1d_weights(source.model)
    for name in source.tensor_names():
        if name in transposed and name.rpartition(".")[0] not in results:  # a dense Conv1D weight
            entry = _dense_entry(source, model, name, dense_dtype, spill)
            entries.append(
                TensorEntry(name, entry.nbytes, partial(_file_layout, name, entry.load, transposed), entry.bf16)
            )
            continue
        entries.extend(_entries_of(source, model, results, name, dense_dtype, spill))
    return entries


def _entries_of(
    source: OpenedSource,
    model: nn.Module,
    results: QuantizedModules,
    name: str,
    dense_dtype: torch.dtype | None,
    spill: SpillArea | None,
) -> list[TensorEntry]:
    """The entries of source tensor ``name``: a quantized module's layout tensors, else its dense entry."""
    module_name, _, pname = name.rpartition(".")
    if module_name in results and pname == "weight":
        result = results[module_name]
        return [
            TensorEntry(f"{module_name}.{key}", nbytes, partial(_module_tensor, result, key))
            for key, nbytes in result.tensor_nbytes().items()
        ]
    return [_dense_entry(source, model, name, dense_dtype, spill)]


def _dense_entry(
    source: OpenedSource, model: nn.Module, name: str, dense_dtype: torch.dtype | None, spill: SpillArea | None
) -> TensorEntry:
    """The entry of a non-quantized tensor: held in memory or spilled, else read from the source."""
    live = live_tensor(model, name)
    spilled = spill.dense_index.get(name) if spill is not None and live is None else None
    if live is not None or spilled is not None:
        return _held_entry(source, name, dense_dtype, live, spill, spilled)
    stored = source.stored_dtype(name)
    if dense_dtype is None or not stored.is_floating_point or stored == dense_dtype:
        return TensorEntry(name, source.stored_nbytes(name), partial(source.stored, name), stored == torch.bfloat16)
    numel = source.stored_nbytes(name) // torch.empty((), dtype=stored).element_size()
    size = numel * torch.empty((), dtype=dense_dtype).element_size()
    return TensorEntry(name, size, partial(_stored_as, source, name, dense_dtype), dense_dtype == torch.bfloat16)


def config_dict(
    source: OpenedSource,
    config: QuantizeConfig,
    dense_dtype: torch.dtype | None = None,
    calibration: dict[str, Any] | None = None,
    rotation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``config.json`` content: the source config plus ``quantization_config`` (:mod:`qhf.checkpoint_config`, with
    the run's ``calibration`` and ``rotation`` records and, for a vision-language model, the subtrees kept dense:
    :func:`qhf.architectures.multimodal.dense_parts`); with ``dense_dtype`` its ``dtype`` (and a ``torch_dtype`` the
    source config carries) names the dense tensors' dtype."""
    from ..architectures.multimodal import dense_parts

    data: dict[str, Any] = source.config.to_dict()
    for key in _CONFIG_DROP:
        data.pop(key, None)
    if dense_dtype is not None:
        from .dense_dtype import dtype_name

        name = dtype_name(dense_dtype)
        data["dtype"] = name
        if "torch_dtype" in data:
            data["torch_dtype"] = name
    data["quantization_config"] = checkpoint_dict(config, calibration, rotation, dense_parts(source.model))
    return data


def write_report(
    directory: Path, results: QuantizedModules, report: Sequence[ModuleReport], summary: QuantizeSummary | None
) -> None:
    """``quant_log.csv`` (one row per module of ``results``, :data:`~qhf.save.quant_log.REPORT_COLUMNS`, from
    its ``report`` row) and ``quant_report.json`` (``summary``'s report form and the same rows)."""
    rows = log_rows(results, report)
    tmp = directory / "quant_log.csv.tmp"
    with tmp.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(REPORT_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(directory / "quant_log.csv")
    summary_dict = summary.report_dict() if summary is not None else {}
    write_atomic_json(directory / "quant_report.json", {"summary": summary_dict, "modules": rows})


def save_checkpoint(
    directory: str | Path,
    source: OpenedSource,
    model: nn.Module,
    results: QuantizedModules,
    config: QuantizeConfig,
    *,
    calibration: dict[str, Any] | None = None,
    rotation: dict[str, Any] | None = None,
    tokenizer: Any = None,
    max_shard_size: int | str = "4GB",
    report: Sequence[ModuleReport] = (),
    summary: QuantizeSummary | None = None,
    dense_dtype: torch.dtype | None = None,
    adapters: dict[str, tuple[torch.Tensor, torch.Tensor]] | None = None,
    before_publish: Callable[[Path, list[Path]], None] | None = None,
    spill: SpillArea | None = None,
) -> list[Path]:
    """Write the checkpoint (see the module docstring); returns the weight shard paths (in ``directory``).

    ``config``: the run's quantization config; ``calibration``: the run's record of its default calibration mixture
    (written to the stored config's ``meta.calibration``), or None; ``rotation``: the run's folded rotation record
    (``meta.rotation``; :mod:`qhf.rotation`), or None.
    ``report``: the run's qlooper report rows and ``summary`` its :class:`~qhf.summary.QuantizeSummary`, for
    ``quant_log.csv`` / ``quant_report.json`` (:func:`write_report`).
    ``dense_dtype``: the dtype of the non-quantized floating tensors and of ``config.json``'s ``dtype``
    (:mod:`qhf.save.dense_dtype`; None keeps each tensor's stored dtype and the source config's value).
    ``adapters``: module name -> (``lora_A.weight`` ``[r, in]``, ``lora_B.weight`` ``[out, r]``) of an EoRA
    run, written to the config's adapter directory (:mod:`qhf.lora_adapter`).
    ``spill``: a streaming run's spill area (:mod:`qhf.spill`), read one tensor at a time.

    Everything -- weights and both config files through qformats' checkpoint writer (size-bounded shards
    and the index, every quantized module validated against its layout), tokenizer, carried-over files
    and the report -- is written into a sibling staging directory; ``before_publish(staging, shards)``
    (e.g. a reload-and-compare that rewrites the report) runs there; only then is the staging directory
    swapped in for ``directory`` atomically (``qformats.checkpoint.publish``). Any failure leaves
    ``directory`` as it was.
    """
    from qformats.checkpoint.publish import staged_directory
    from qformats.checkpoint.writer import write_checkpoint_files

    from .side_files import copy_side_files, save_tokenizer

    directory = Path(directory)
    entries = tensor_entries(source, model, results, dense_dtype, spill)
    model_config = config_dict(source, config, dense_dtype, calibration, rotation)
    quantization = model_config.pop("quantization_config")
    with staged_directory(directory) as staging:
        written = write_checkpoint_files(
            staging,
            numpy_stream(entries),
            quantize_config=quantization,
            model_config=model_config,
            max_shard_size=max_shard_size,
            metadata={"quantizer": quantization["meta"]["quantizer"][0]},
            dtypes={**bf16_names(entries), **fp8_storage_dtypes(config, list(results))},
            validate=not is_weight_only(config),  # qformats' layouts do not describe these families; verify reads them
        )
        names = [name for name in written.files if name.endswith(".safetensors")]
        if tokenizer is not None:
            save_tokenizer(tokenizer, staging, directory)
        copy_side_files(source.extra_files, staging, directory)
        eora = eora_adapter(config)
        if adapters and eora is not None:
            from ..lora_adapter import write_adapter

            rank, base = int(eora["rank"]), str(source.path)
            write_adapter(staging / eora["path"], adapters, rank, base)
        write_report(staging, results, report, summary)
        if before_publish is not None:
            before_publish(staging, [staging / name for name in names])
    return [directory / name for name in names]
