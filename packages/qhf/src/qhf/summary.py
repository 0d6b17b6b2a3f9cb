"""The typed account of one run: :class:`QuantizeSummary`, what ``QuantModel.quantize`` and ``save`` return.

It is built from qlooper's ``QuantizationRun`` (the per-module rows stay there: ``QuantModel.run.report``)
plus what qhf did around the loop (calibration, settings, adapters, executor). ``save`` returns a copy with
the save fields set. :meth:`QuantizeSummary.report_dict` is the ``summary`` object of ``quant_report.json``:
its keys, order and values are the file format and do not change with the class.

Reading ``summary["key"]`` (the dict ``quantize`` returned before) still works through
:meth:`QuantizeSummary.__getitem__` -- it reads :meth:`report_dict` -- but is deprecated: read the attributes.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CalibrationStats:
    """The prepared calibration set: ``rows`` (sequences), ``tokens`` (non-padding tokens), ``dropped`` (rows
    left out, e.g. empty after tokenizing)."""

    rows: int
    tokens: int
    dropped: int

    def report_dict(self) -> dict[str, int]:
        return {"rows": self.rows, "tokens": self.tokens, "dropped": self.dropped}


@dataclass(frozen=True)
class SavedCheckpoint:
    """Where ``save`` wrote: ``path``, the number of weight ``shards``, their ``bytes`` and the save ``seconds``
    (wall time, verification excluded)."""

    path: str
    shards: int
    bytes: int
    seconds: float

    def report_dict(self) -> dict[str, Any]:
        return {"path": self.path, "shards": self.shards, "bytes": self.bytes, "seconds": self.seconds}


@dataclass(frozen=True)
class QuantizeSummary:
    """One quantization run, from the source to (after ``save``) the written checkpoint.

    * ``source`` (path), ``model_type``;
    * ``calibration_source``: qhf's default mixture record (a dict) or ``"user"``; None without calibration;
      ``tokenizer_note``: a padding token the tokenizer was given (None: none needed);
    * ``calibration``: the prepared set's :class:`CalibrationStats`; ``calibration_seconds``: building it
      (generation included), wall seconds; both None when the method needs no calibration;
    * ``method``, ``format``, ``bits``, ``group_size``, ``sym``: the settings the run used;
    * ``modules``: modules quantized; ``fallbacks``: names of modules that fell back (in report order);
    * ``resumed_from``: the plan step restored from a checkpoint (0: a fresh run);
    * ``quantize_seconds``: the loop's wall seconds (calibration excluded); ``largest_layer_bytes``: the
      largest decoder layer's parameter bytes; ``lockstep_skipped``: layer name -> why it ran per-group
      forwards;
    * ``adapter``: the EoRA adapter settings and its ``modules`` count; ``algorithm``: GPTAQ/FOEM's name and
      terms, or ``{"name": "awq_gptq"}`` for GPTQ on AWQ-scaled weights; ``executor``: the executor's own
      description (None: this process); ``compute``: where the layers ran (``device``, ``compute_dtype``,
      ``cache_device``; None: not recorded); ``rotation``: the folded rotation's record
      (:mod:`qhf.rotation.fold_source`: what applied, the matrices, an untied output projection, what was
      refused; None: no rotation); ``multimodal``: a vision-language model's ``language_model`` path, the
      ``dense`` subtrees and the ``note`` that calibration was text only
      (:func:`qhf.architectures.multimodal.text_only_record`; None for a causal LM); ``mixed_precision``: a
      ``bits_budget`` run's record (budget, candidates, achieved ``bits_per_weight``, ``stored_bits`` /
      ``weights``, ``modules_by_bits``, ``bits`` per module, the sensitivity pass's rows and seconds;
      :mod:`qhf.mixed_precision.plan`; None without a budget);
    * set by ``save``: ``dense_dtype`` (of the non-quantized tensors), ``saved`` (:class:`SavedCheckpoint`),
      ``verification`` (the reload-and-compare report as a dict, or ``"skipped (verify=False)"``).
    """

    source: str
    model_type: str
    method: str
    format: str
    bits: int
    group_size: int
    sym: bool
    modules: int
    fallbacks: tuple[str, ...]
    resumed_from: int
    quantize_seconds: float
    largest_layer_bytes: int
    lockstep_skipped: Mapping[str, str] = field(default_factory=dict)
    calibration_source: Mapping[str, Any] | str | None = None
    tokenizer_note: str | None = None
    calibration: CalibrationStats | None = None
    calibration_seconds: float | None = None
    adapter: Mapping[str, Any] | None = None
    algorithm: Mapping[str, Any] | None = None
    executor: Mapping[str, Any] | None = None
    compute: Mapping[str, str] | None = None
    rotation: Mapping[str, Any] | None = None
    multimodal: Mapping[str, Any] | None = None
    mixed_precision: Mapping[str, Any] | None = None
    dense_dtype: str | None = None
    saved: SavedCheckpoint | None = None
    verification: Mapping[str, Any] | str | None = None

    @property
    def verified(self) -> bool:
        """Whether ``save`` reloaded the checkpoint and the comparison passed."""
        return isinstance(self.verification, Mapping) and bool(self.verification.get("passed"))

    def report_dict(self) -> dict[str, Any]:
        """The ``summary`` object of ``quant_report.json`` (keys and order fixed by the file format; the
        optional keys only when set)."""
        out: dict[str, Any] = {"source": self.source, "model_type": self.model_type}
        pre = {
            "calibration_source": _plain(self.calibration_source),
            "tokenizer_note": self.tokenizer_note,
            "calibration": self.calibration.report_dict() if self.calibration is not None else None,
            "calibration_seconds": self.calibration_seconds,
        }
        out.update({key: value for key, value in pre.items() if value is not None})
        out.update(
            {
                "method": self.method,
                "format": self.format,
                "bits": self.bits,
                "group_size": self.group_size,
                "sym": self.sym,
                "modules": self.modules,
                "fallbacks": list(self.fallbacks),
                "resumed_from": self.resumed_from,
                "quantize_seconds": self.quantize_seconds,
                "largest_layer_bytes": self.largest_layer_bytes,
                "lockstep_skipped": dict(self.lockstep_skipped),
            }
        )
        post = {
            "adapter": _plain(self.adapter),
            "algorithm": _plain(self.algorithm),
            "executor": _plain(self.executor),
            "compute": _plain(self.compute),
            "rotation": _plain(self.rotation),
            "multimodal": _plain(self.multimodal),
            "mixed_precision": _plain(self.mixed_precision),
            "dense_dtype": self.dense_dtype,
            "saved": self.saved.report_dict() if self.saved is not None else None,
            "verification": _plain(self.verification),
        }
        out.update({key: value for key, value in post.items() if value is not None})
        return out

    def __getitem__(self, key: str) -> Any:
        """Deprecated: ``summary["key"]`` as in the dict ``quantize`` returned before (the report form); read
        the attribute instead. A key that is not set raises ``KeyError`` as the dict did."""
        warnings.warn(
            f"QuantizeSummary[{key!r}] is deprecated; read the attribute (summary.{key})",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.report_dict()[key]

    def __contains__(self, key: object) -> bool:
        """Deprecated: ``"key" in summary`` as in the dict (whether the report form has ``key``)."""
        warnings.warn(
            f"'{key}' in QuantizeSummary is deprecated; test the attribute (summary.{key} is not None)",
            DeprecationWarning,
            stacklevel=2,
        )
        return key in self.report_dict()


def _plain(value: Any) -> Any:
    """A mapping as a plain dict (the report's JSON form); anything else as it is."""
    return dict(value) if isinstance(value, Mapping) else value
