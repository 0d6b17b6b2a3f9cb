"""A learned residual rotation (kind ``"learned"``): the Hadamard ``Q0`` optimized on the calibration rows.

:func:`learn_residual` runs after the calibration rows are built and before the transform is installed:

1. one dense forward over :data:`LEARN_ROWS` of the calibration rows, one decoder layer at a time (qlooper's loop
   in lockstep, :class:`GramProcessor`, which quantizes nothing), accumulating each quantized linear's input Gram
   ``sum x xᵀ`` (float64, padding excluded; the modules of a group reading one input share it);
2. every linear the plan rotates on the residual side becomes a :class:`qalgos.learned_rotation.RotationTerm`:
   its weight read through the plan with the residual matrix set to the identity (norm scales and the per-head
   ``H`` folded in, ``Q`` not), a reader (``READ`` step) or a writer (``WRITE``), and its Gram's factor
   (o_proj's input Gram rotated by the per-head ``H`` first, as its columns are);
3. :func:`qalgos.learned_rotation.learn_rotation` from the prepared (Hadamard) residual matrix with the run's
   quantization spec (width, group size, symmetry; per-module ``dynamic`` widths and the MSE search are not
   modelled), the setting's ``steps`` / ``lr``, rows drawn from :func:`qalgos.orthogonal.stream_seed`
   ``(seed, "learned", n)``;
4. the transform's residual matrix is replaced (the plan and the head matrix are unchanged, and the fold verified
   by the replica holds for any orthogonal ``Q``); the record's ``matrices.residual`` becomes ``{"size", "kind":
   "learned", "construction", "sha256"}`` (of the float64 matrix's bytes) and ``learned`` holds ``steps``, ``lr``,
   ``rows``, ``tokens``, ``rank``, ``row_fraction``, ``loss_start`` and ``loss_end`` (:math:`L` at the Hadamard
   start and at the result). The record is part of resume identity, so a run resumed with another matrix is
   refused.

The same seed, calibration rows and ``torch`` thread count give the same matrix bytes (float32 CPU arithmetic).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import replace
from typing import Any, cast

import torch
from qalgos.learned_rotation import GRAM_RANK, READER, ROW_FRACTION, WRITER, RotationTerm, gram_factor, learn_rotation
from qalgos.orthogonal import stream_seed
from qalgos.spec import QuantSpec
from qlooper.calibration import CalibrationSet
from qlooper.definition import ResolvedGroup
from qlooper.processors.base import LayerContext, ModuleResult

from ..errors import RotationError
from ..input_hooks import HookedInputs
from ..mixed_precision.sensitivity import TransientLayers, row_subset
from ..source.opened_source import OpenedSource
from .fold import FoldedRotation
from .fold_source import PreparedRotation
from .plan import OUTPUT_HEADS, READ, WRITE

logger = logging.getLogger(__name__)

#: Calibration rows the Gram pass reads at most (evenly spaced over the calibration set).
LEARN_ROWS = 16


class GramProcessor(HookedInputs):
    """A qlooper processor that accumulates input Grams (module docstring) and quantizes nothing. ``grams``:
    module full name -> its input's ``sum x xᵀ`` float64 ``[in, in]``; ``tokens``: module -> tokens summed."""

    method = "rotation-gram"
    needs_calibration = True

    def __init__(self) -> None:
        self.grams: dict[str, torch.Tensor] = {}
        self.tokens: dict[str, int] = {}
        self._sums: dict[str, torch.Tensor] = {}
        self._counts: dict[str, int] = {}

    def start_layer(self, ctx: LayerContext) -> None:
        self._sums, self._counts = {}, {}

    def _add(self, ctx: LayerContext, key: str, x: torch.Tensor) -> None:
        rows = ctx.valid_tokens(x.detach()).to(device="cpu", dtype=torch.float64)
        if key not in self._sums:
            self._sums[key] = torch.zeros(int(rows.shape[-1]), int(rows.shape[-1]), dtype=torch.float64)
            self._counts[key] = 0
        self._sums[key] += rows.T @ rows
        self._counts[key] += int(rows.shape[0])

    def process(self, ctx: LayerContext, group: ResolvedGroup) -> list[ModuleResult]:
        for mod in group.modules:
            if mod.input_key in self._sums:
                self.grams[mod.full_name] = self._sums[mod.input_key]
                self.tokens[mod.full_name] = self._counts[mod.input_key]
        return []

    def end_layer(self, ctx: LayerContext) -> list[ModuleResult]:
        return []

    def describe(self) -> dict[str, Any]:
        return {"method": self.method}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        return None


def _head_blocks(head: torch.Tensor, width: int) -> torch.Tensor:
    """``blockdiag(H, ..., H)`` ``[width, width]`` (o_proj's columns per head)."""
    d = int(head.shape[0])
    blocks: torch.Tensor = torch.kron(torch.eye(width // d, dtype=head.dtype), head)
    return blocks


def rotation_terms(
    transform: FoldedRotation, read: Any, grams: dict[str, torch.Tensor], tokens: dict[str, int]
) -> list[RotationTerm]:
    """The :class:`RotationTerm` of every module with a Gram whose weight the plan rotates on the residual side;
    ``read(name)`` gives an untransformed source tensor."""
    n = int(transform.residual.shape[0]) if transform.residual is not None else 0
    unrotated = FoldedRotation(transform.plan, torch.eye(n, dtype=torch.float64), transform.head, transform.offset)
    terms = []
    factors: dict[tuple[int, bool], tuple[torch.Tensor, float]] = {}
    for module, gram in grams.items():
        name = f"{module}.weight"
        kinds = [step.kind for step in transform.plan.get(name, ())]
        side = READER if READ in kinds else WRITER if WRITE in kinds else None
        if side is None or not tokens.get(module):
            continue
        weight = unrotated(name, read)
        heads = OUTPUT_HEADS in kinds and transform.head is not None
        key = (id(gram), heads)  # the modules of a group that read one input share its Gram
        if key not in factors:
            mean = gram / tokens[module]
            if heads:
                blocks = _head_blocks(cast(torch.Tensor, transform.head), int(mean.shape[0]))
                mean = blocks.T @ mean @ blocks
            factors[key] = gram_factor(mean)
        factor, floor = factors[key]
        terms.append(RotationTerm(name, side, weight.to(torch.float32), factor, floor))
    return terms


def collect_grams(
    source: OpenedSource, calibration: CalibrationSet, *, format: str, device: Any = None, cache_device: str = "cpu"
) -> tuple[GramProcessor, CalibrationSet]:
    """The Gram pass (module docstring, step 1) over ``source``'s dense decoder layers; the modules outside them
    must be materialized."""
    from qlooper.api import quantize_model
    from qlooper.loop import LoopOptions

    subset = row_subset(calibration, LEARN_ROWS)
    processor = GramProcessor()
    options = LoopOptions(
        lockstep=True,
        lockstep_budget=None,
        layer_loader=TransientLayers(source),
        device=device,
        cache_device=cache_device,
    )
    quantize_model(source.model, source.definition, subset, None, processor, format=format, options=options)
    return processor, subset


def learn_residual(
    source: OpenedSource,
    prepared: PreparedRotation,
    calibration: CalibrationSet | None,
    spec: QuantSpec,
    *,
    format: str,
    device: Any = None,
    cache_device: str = "cpu",
) -> PreparedRotation:
    """``prepared`` (kind ``"learned"``) with its residual matrix learned (module docstring); unchanged when the
    residual rotation was left out (the record's ``refused`` says why). Raises :class:`RotationError` without
    calibration rows (a method that takes none)."""
    record = prepared.record
    transform = prepared.transform
    if transform is None or transform.residual is None or not record.get("residual"):
        logger.warning("rotation kind 'learned': the residual rotation is left out, nothing is learned")
        return prepared
    if calibration is None:
        raise RotationError(
            "rotation.kind 'learned': learns the rotation on the calibration rows, and this method takes none; "
            "use 'hadamard', or a calibrated method"
        )
    grams, subset = collect_grams(source, calibration, format=format, device=device, cache_device=cache_device)
    terms = rotation_terms(transform, lambda name: source.stored(name).to(torch.float64), grams.grams, grams.tokens)
    n = int(transform.residual.shape[0])
    learned = learn_rotation(
        terms,
        transform.residual,
        spec,
        steps=int(record["steps"]),
        lr=float(record["lr"]),
        seed=stream_seed(int(record["seed"]), "learned", n),
    )
    logger.info(
        "rotation learned in %d steps (%.1f CPU s): loss %.6g -> %.6g over %d modules",
        learned.steps, learned.cpu_seconds, learned.loss_start, learned.loss_end, len(terms),
    )  # fmt: skip
    matrix = learned.matrix.contiguous()
    start = record["matrices"]["residual"]
    matrices = dict(record["matrices"])
    matrices["residual"] = {
        "size": n,
        "kind": "learned",
        "construction": f"cayley-adam from {start['kind']} {start['construction']}",
        "sha256": hashlib.sha256(matrix.numpy().tobytes()).hexdigest(),
    }
    new_record = dict(record)
    new_record["matrices"] = matrices
    new_record["learned"] = {
        "steps": learned.steps,
        "lr": float(record["lr"]),
        "rows": subset.rows,
        "tokens": subset.total_tokens,
        "rank": GRAM_RANK,
        "row_fraction": ROW_FRACTION,
        "modules": len(terms),
        "loss_start": learned.loss_start,
        "loss_end": learned.loss_end,
    }
    return replace(prepared, transform=replace(transform, residual=matrix), record=new_record)
