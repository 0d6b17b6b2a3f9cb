"""Transcoding a whole checkpoint directory to another layout, streamed shard by shard, bit exact.

Every quantized module goes through :func:`qformats.transcode.transcode` (so an impossible module
raises :class:`~qformats.errors.TranscodeError` naming it, and nothing is written); every other tensor
passes through. The quantization config is rewritten for the target: method family (``gptq`` for
GPTQ/Marlin targets, ``awq`` for AWQ targets), ``format``/``checkpoint_format`` (and AWQ's ``version``,
``zero_point``), ``pack_dtype``; QQQ / ParoQuant targets get their own method and ``wbits`` / ``krot``;
other fields (``dynamic``, ``meta``, ...) are kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from ..errors import TranscodeError
from ..layouts.families import get_family, scalar_family_keys
from ..transcode import transcode
from .config_files import find_quant_config
from .dequantize import model_config_without_quantization
from .modules import ModuleEntry
from .reader import Checkpoint
from .streaming import stream_converted
from .writer import WriteReport, write_checkpoint

AWQ_TARGETS = {"gemm", "gemv", "gemv_fast", "llm-awq", "awq_marlin"}
# Family fields a target drops from the source config (a QQQ / ParoQuant target writes its own: the keys of
# its weight family's ``ScalarBridge.config_fields``; ``zero_point`` is an alias key).
FAMILY_KEYS = ("wbits", "krot", "sym")
ALIAS_KEYS = ("method", "quant_method", "format", "checkpoint_format", "version", "zero_point", "backend", "pack_dtype")


def target_config(raw: dict[str, object], to: str, sym: bool) -> dict[str, object]:
    """The quantization config for layout ``to``, keeping every non-layout field of ``raw``."""
    cfg = {k: v for k, v in raw.items() if str(k).lower() not in (*ALIAS_KEYS, *FAMILY_KEYS)}
    if to in scalar_family_keys():  # QQQ / ParoQuant: the family's own config fields
        bridge = get_family(to).scalar
        cfg.update({"method": to, "quant_method": to, "format": to, "checkpoint_format": to, "pack_dtype": "int32"})
        cfg.update(bridge.config_fields if bridge is not None else {})
        return cfg
    awq_target = to in AWQ_TARGETS  # the target layout decides the stored method and AWQ's own fields
    method = "awq" if awq_target else "gptq"
    fmt = "marlin" if to in ("marlin", "awq_marlin") else to
    cfg.update({"method": method, "quant_method": method, "format": fmt, "checkpoint_format": fmt, "sym": sym})
    cfg["pack_dtype"] = "int16" if to in ("gemv_fast", "llm-awq") else "int32"
    if awq_target:
        cfg["zero_point"] = not sym
        cfg["version"] = fmt
    return cfg


def iter_transcoded(checkpoint: Checkpoint, to: str) -> Iterator[tuple[str, np.ndarray]]:
    """Yield the target checkpoint's ``(name, array)`` pairs, shard by shard."""

    def relaid(entry: ModuleEntry, tensors: dict[str, np.ndarray]) -> Iterator[tuple[str, np.ndarray]]:
        try:
            result = transcode(tensors, from_=entry.layout, to=to, meta=entry.meta)
        except TranscodeError as exc:
            raise TranscodeError(f"module {entry.prefix!r}: {exc}") from None
        for suffix, array in result.tensors.items():
            yield f"{entry.prefix}.{suffix}", array

    return stream_converted(checkpoint, relaid)


def transcode_checkpoint(
    source: str | Path,
    target: str | Path,
    *,
    to: str,
    max_shard_size: int | str = "4GB",
    side_files: Iterable[str] = (),
) -> WriteReport:
    """Write checkpoint ``source`` re-laid-out as ``to`` into ``target`` (validated, atomic); the ``side_files``
    present in ``source`` (tokenizer, generation config) are published with it."""
    checkpoint = Checkpoint(source)
    _, raw = find_quant_config(Path(source))
    syms = {entry.meta.sym for entry in checkpoint.modules()}
    sym = syms.pop() if len(syms) == 1 else checkpoint.fields.sym
    config = target_config(raw, to, sym)
    return write_checkpoint(
        target,
        iter_transcoded(checkpoint, to),
        quantize_config=config,
        model_config=model_config_without_quantization(Path(source)),
        max_shard_size=max_shard_size,
        side_files=(Path(source), tuple(side_files)),
    )
