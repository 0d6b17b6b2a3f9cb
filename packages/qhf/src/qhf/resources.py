"""Will the machine hold the run? Estimates of peak RAM and disk bytes, checked before any work.

Sizes come from the meta skeleton's parameter shapes in the compute dtype (nothing is read). A quantization's
peak RAM is estimated as the modules outside the decoder layers + 2 x the largest layer (the one being
quantized and one whose finalizers catch up) + the calibration cache (``tokens x hidden_size x`` compute
bytes, x2: a layer's inputs and outputs) and, keeping the model in memory, every quantized weight at
``1 + bits/8`` bytes a weight (codes and packed words). A streaming run spills ``1 + bits/8`` bytes a weight
plus the layers' other tensors to disk; a checkpoint takes ``bits/8`` bytes a weight (plus 2 bytes of scale a
group) and the dense tensors at their stored size. A folded rotation (:mod:`qhf.rotation`) adds its own peaks:
before the run, the float64 replica (one decoder layer per layer structure, 8 bytes an element) beside the
modules outside the layers; during it, an output projection the rotation unties (its own copy of the embedding)
and the working set of the per-tensor transform (the ``[hidden, hidden]`` matrix in float64 and the largest
tensor read and rotated in float64, twice). :func:`check_run` / :func:`check_save` raise
:class:`~qhf.errors.InsufficientResourcesError` stating estimate and availability when the machine has less.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InsufficientResourcesError, QHFError
from .source.opened_source import OpenedSource

if TYPE_CHECKING:
    from qformats.config import QuantizeConfig

#: ``keep_in_memory="auto"`` streams when the decoder layers take more bytes than this in the compute dtype.
STREAM_ABOVE_BYTES = 2 * 2**30
GIB = 2**30


@dataclass(frozen=True)
class ModelSizes:
    """Bytes in the compute dtype: ``base`` (outside the decoder layers), ``largest_layer``, ``layers`` (all
    decoder layers); ``linear_weights`` (elements of the decoder layers' 2-D weights), ``element`` (bytes a
    compute-dtype element), ``hidden`` (``hidden_size``)."""

    base: int
    largest_layer: int
    layers: int
    linear_weights: int
    element: int
    hidden: int


@dataclass(frozen=True)
class RotationSizes:
    """Bytes a folded rotation adds: ``replica`` (the float64 replica's decoder layers, one per layer structure),
    ``untied_head`` (a tied output projection the residual rotation gives its own tensor; 0 when not tied) and
    ``working`` (the float64 ``[hidden, hidden]`` matrix plus the largest tensor read and rotated in float64)."""

    replica: int
    untied_head: int
    working: int


def model_sizes(source: OpenedSource) -> ModelSizes:
    """:class:`ModelSizes` of ``source``'s skeleton (shapes only; nothing materialized)."""
    layers_path = source.definition.layers_path + "."
    per_layer: dict[str, int] = {}
    base = linear = 0
    element = 1
    for name, param in source.model.named_parameters():
        element = param.element_size()
        size = param.numel() * element
        if not name.startswith(layers_path):
            base += size
            continue
        layer = name[: name.index(".", len(layers_path)) if "." in name[len(layers_path) :] else len(name)]
        per_layer[layer] = per_layer.get(layer, 0) + size
        if param.dim() == 2 and name.endswith(".weight"):
            linear += param.numel()
    text = source.config.get_text_config() if hasattr(source.config, "get_text_config") else source.config
    hidden = int(getattr(text, "hidden_size", 0) or 0)
    layers = sum(per_layer.values())
    return ModelSizes(base, max(per_layer.values(), default=0), layers, linear, element, hidden)


def rotation_sizes(source: OpenedSource, sizes: ModelSizes) -> RotationSizes:
    """:class:`RotationSizes` of ``source`` (shapes only; an upper bound: the residual part may be left out)."""
    structures = max(len(source.discovery.layer_structures), 1)
    replica = structures * (sizes.largest_layer // max(sizes.element, 1)) * 8
    params = dict(source.model.named_parameters(remove_duplicate=False))
    head = params.get(source.head_weight)
    untied = head.numel() * sizes.element if source.tied and head is not None else 0
    largest = max((p.numel() for p in params.values()), default=0)
    return RotationSizes(replica, untied, sizes.hidden * sizes.hidden * 8 + 2 * largest * 8)


def wants_streaming(source: OpenedSource, keep_in_memory: Any) -> bool:
    """Whether a run streams: ``keep_in_memory`` False, or ``"auto"`` and layers above :data:`STREAM_ABOVE_BYTES`."""
    if keep_in_memory is True or keep_in_memory is False:
        return not keep_in_memory
    if keep_in_memory == "auto":
        return model_sizes(source).layers > STREAM_ABOVE_BYTES
    raise QHFError(f"quantize: keep_in_memory expects True, False or 'auto', found {keep_in_memory!r}")


def available_ram() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes; None where the file or the field is missing."""
    try:
        text = Path("/proc/meminfo").read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def available_disk(path: str | Path) -> int:
    """Free bytes of the file system holding ``path`` (its nearest existing ancestor)."""
    where = Path(path).absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    return int(shutil.disk_usage(where).free)


def run_ram_bytes(
    sizes: ModelSizes, bits: int, calibration_tokens: int, streaming: bool, rotation: RotationSizes | None = None
) -> int:
    """Estimated peak RAM of a quantization run (module docstring); ``rotation``: a folded rotation's sizes."""
    cache = 2 * calibration_tokens * sizes.hidden * sizes.element
    kept = 0 if streaming else sizes.linear_weights * (8 + bits) // 8
    run = sizes.base + 2 * sizes.largest_layer + cache + kept
    if rotation is None:
        return run
    before = sizes.base + rotation.replica + rotation.working  # the replica check, before any layer runs
    return max(before, run + rotation.untied_head + rotation.working)


def spill_bytes(sizes: ModelSizes, bits: int) -> int:
    """Estimated bytes of a streaming run's spill area (codes, packed words and the layers' other tensors)."""
    other = sizes.layers - sizes.linear_weights * sizes.element
    return sizes.linear_weights * (8 + bits) // 8 + max(other, 0)


def checkpoint_bytes(sizes: ModelSizes, bits: int, group_size: int) -> int:
    """Estimated bytes of the saved checkpoint (packed weights, fp16 scales a group, dense tensors)."""
    groups = sizes.linear_weights // group_size if group_size and group_size > 0 else 0
    other = sizes.layers - sizes.linear_weights * sizes.element
    return sizes.linear_weights * bits // 8 + 2 * groups + max(other, 0) + sizes.base


def _refuse(what: str, need: int, have: int, where: str) -> None:
    raise InsufficientResourcesError(
        f"{what}: the run needs an estimated {need / GIB:.2f} GiB of {where} but {have / GIB:.2f} GiB is available"
    )


def check_run(
    source: OpenedSource,
    config: QuantizeConfig,
    calibration_tokens: int,
    streaming: bool,
    spill: Path | None,
    rotated: bool = False,
) -> None:
    """Refuse a quantization whose estimated peak RAM exceeds ``MemAvailable`` or (streaming) whose spill exceeds
    the free disk at ``spill`` (raises :class:`~qhf.errors.InsufficientResourcesError`); ``rotated``: the run
    folds a rotation in (its replica, untied head and working set counted)."""
    sizes = model_sizes(source)
    bits = int(config.width)
    ram = available_ram()
    need = run_ram_bytes(sizes, bits, calibration_tokens, streaming, rotation_sizes(source, sizes) if rotated else None)
    if ram is not None and need > ram:
        hint = "" if streaming else "; keep_in_memory=False streams finished layers to disk"
        _refuse(f"quantize {source.path}{hint}", need, ram, "RAM (MemAvailable)")
    if streaming and spill is not None:
        need, free = spill_bytes(sizes, bits), available_disk(spill)
        if need > free:
            _refuse(f"quantize {source.path}", need, free, f"disk at the spill area {spill}")


def check_save(source: OpenedSource, config: QuantizeConfig, directory: Path) -> None:
    """Refuse a save whose estimated checkpoint bytes exceed the free disk at ``directory``."""
    sizes = model_sizes(source)
    need, free = checkpoint_bytes(sizes, int(config.width), int(config.group_size or 0)), available_disk(directory)
    if need > free:
        _refuse(f"save {directory}", need, free, f"disk at {directory}")
