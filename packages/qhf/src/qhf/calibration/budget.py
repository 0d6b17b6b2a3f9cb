"""How many of the default mixture's self-generated rows fit the generation budget.

The rule is deterministic: it reads the model's size (parameter counts, from the meta-device model; no
weight is read) and the requested rows and length, never a clock, so the same model and settings give
the same rows on every machine. Costs are counted in *parameter-tokens* (one token through a matrix of P
parameters costs P multiply-adds):

* quantization, at least: every calibration token goes through every decoder layer
  :data:`CALIBRATION_PASSES` times (the input capture and the replay after the layer is quantized):
  ``CALIBRATION_PASSES x decoder_parameters x rows x length``. The Hessians and solves come on top, so this
  is a lower bound and the budget a conservative one;
* one generated row: ``length - 1`` decode steps through the decoder *and* the output head, each a
  one-token-per-row forward that runs :data:`DECODE_PENALTY` times slower per parameter-token than a
  calibration forward (small matrix products, a KV cache read per step):
  ``DECODE_PENALTY x (decoder_parameters + head_parameters) x (length - 1)``.

The rows granted are ``min(requested, floor(share x quantization / row))``; the rest of the requested rows
are filled with further blocks of the bundled documentation, so the row count stays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from torch import nn

from ..errors import CalibrationError

#: The share of the (lower-bound) quantization cost that generation may take.
GENERATION_SHARE = 0.10
#: Decoder passes over every calibration token during quantization (input capture, replay).
CALIBRATION_PASSES = 2
#: Cost of a decode step's parameter-token relative to a calibration forward's: 2.3 measured on SmolLM2-135M
#: float32 (batch 16 decode against one-row 128-token forwards, one thread, same process), rounded up
#: (see docs/calibration.md, "The generation budget").
DECODE_PENALTY = 2.5


@dataclass(frozen=True)
class ModelSize:
    """Parameter counts (elements) of the decoder layers and of the output head (vocab x hidden; counted even
    when tied to the input embedding, since every decode step multiplies by it)."""

    decoder_parameters: int
    head_parameters: int

    @classmethod
    def of(cls, model: nn.Module, layers_path: str) -> ModelSize:
        """Count ``model``'s parameters (meta-device parameters count too: only shapes are read)."""
        layers = model.get_submodule(layers_path)
        head: Any = model.get_output_embeddings()  # type: ignore[operator]
        if head is None:
            raise CalibrationError(f"generation budget: {type(model).__name__} has no output embeddings")
        return cls(int(sum(p.numel() for p in layers.parameters())), int(head.weight.numel()))


@dataclass(frozen=True)
class GenerationBudget:
    """The budget's decision: ``granted`` of ``requested`` rows of ``length`` tokens; the costs in
    parameter-tokens; ``reason`` says why fewer rows than requested were granted (None when all fit)."""

    requested: int
    granted: int
    share: float
    quantize_cost: float
    row_cost: float
    reason: str | None

    def as_meta(self) -> dict[str, Any]:
        """The decision as recorded in the calibration record (deterministic: no times)."""
        return {
            "requested": self.requested,
            "granted": self.granted,
            "share": self.share,
            "rule": f"rows x {DECODE_PENALTY:g} x (decoder + head) x (length - 1) <= share x "
            f"{CALIBRATION_PASSES} x decoder x calibration rows x length",
            "reason": self.reason,
        }


def plan_generation(requested: int, total_rows: int, length: int, size: ModelSize, share: float) -> GenerationBudget:
    """The rows of ``length`` tokens that fit ``share`` of the quantization cost of ``total_rows`` rows.

    ``requested`` >= 0 generated rows, ``total_rows`` >= 1 calibration rows in all, ``length`` >= 2 tokens per
    row, ``share`` in [0, 1]. Raises :class:`CalibrationError` naming a value out of range.
    """
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise CalibrationError(f"default calibration: generation_share: expected a number in [0, 1], found {share!r}")
    if requested < 0 or total_rows < 1 or length < 2:
        raise CalibrationError(
            f"generation budget: expected requested >= 0, total_rows >= 1, length >= 2, found "
            f"{requested=}, {total_rows=}, {length=}"
        )
    quantize_cost = float(CALIBRATION_PASSES * size.decoder_parameters * total_rows * length)
    row_cost = float(DECODE_PENALTY * (size.decoder_parameters + size.head_parameters) * (length - 1))
    fit = math.floor(share * quantize_cost / row_cost) if row_cost > 0 else requested
    granted = min(requested, fit)
    reason = None
    if granted < requested:
        reason = (
            f"{granted} of {requested} self-generated rows fit {share:.0%} of the estimated quantization cost "
            f"(a generated row costs {row_cost / quantize_cost:.1%} of it); the other {requested - granted} rows "
            "are documentation blocks"
        )
    return GenerationBudget(requested, granted, float(share), quantize_cost, row_cost, reason)
