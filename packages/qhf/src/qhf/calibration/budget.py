"""How many of the default mixture's self-generated rows fit the generation budget.

The rule is deterministic: it reads the model's size (parameter counts, from the meta-device model; no
weight is read) and the requested rows and length, never a clock, so the same model and settings give
the same rows on every machine. Costs are counted in *parameter-tokens* (one token through a matrix of P
parameters costs P multiply-adds):

* quantization, at least: every calibration token goes through every decoder layer
  :data:`CALIBRATION_PASSES` times (the input capture and the replay after the layer is quantized):
  ``CALIBRATION_PASSES x decoder_parameters x rows x length``. The Hessians and solves come on top, so this
  is a lower bound and the budget a conservative one;
* generation: ``length - 1`` decode steps per batch of up to ``batch_size`` rows, each a one-token-per-row
  forward through the decoder *and* the output head. A step's cost is
  ``DECODE_PENALTY x (decoder_parameters + head_parameters) x (rows in the batch + STEP_OVERHEAD_ROWS)``: per
  row it runs slower than a calibration forward (:data:`DECODE_PENALTY`), and every step has a fixed part
  (kernel launches, per-layer work, KV cache bookkeeping) that costs about :data:`STEP_OVERHEAD_ROWS` rows'
  worth whatever the batch: 2 rows of 256 tokens cost more than half of 16 rows.

The rows granted are the most rows, up to the requested ones, whose generation costs at most
``share x quantization``; the rest of the requested rows are filled with further blocks of the bundled
documentation, so the row count stays. With the fixed part of a step, small models at short calibration
(e.g. the quickstart's 16 + 16 rows) get none: a single row would already cost more than the share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import nn

from ..errors import CalibrationError

#: The share of the (lower-bound) quantization cost that generation may take.
GENERATION_SHARE = 0.10
#: Decoder passes over every calibration token during quantization (input capture, replay).
CALIBRATION_PASSES = 2
#: Cost of a decode step's parameter-token per row, relative to a calibration forward's, and the fixed part of
#: a step in rows: SmolLM2-135M float32, one thread, decoded 108 tokens/s at batch 16 and 144 at batch 32
#: (steps of 0.148 s and 0.223 s: 0.0047 s per row + 0.073 s, about 16 rows' worth), and a batch-16 row-token
#: cost 2.3 times a one-row 128-token forward's (same process), hence 2.3 x 16 / 32 = 1.15, rounded up
#: (see docs/calibration.md, "The generation budget").
DECODE_PENALTY = 1.25
STEP_OVERHEAD_ROWS = 16


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
    """The budget's decision: ``granted`` of ``requested`` rows; ``quantize_cost`` and ``allowed`` (the share of
    it generation may take) in parameter-tokens; ``reason`` says why fewer rows than requested were granted
    (None when all fit)."""

    requested: int
    granted: int
    share: float
    quantize_cost: float
    allowed: float
    reason: str | None

    def as_meta(self) -> dict[str, Any]:
        """The decision as recorded in the calibration record (deterministic: no times)."""
        return {
            "requested": self.requested,
            "granted": self.granted,
            "share": self.share,
            "rule": f"sum over batches of (length - 1) x {DECODE_PENALTY:g} x (decoder + head) x (batch rows + "
            f"{STEP_OVERHEAD_ROWS}) <= share x {CALIBRATION_PASSES} x decoder x calibration rows x length",
            "reason": self.reason,
        }


def generation_cost(rows: int, length: int, batch_size: int, size: ModelSize) -> float:
    """Parameter-tokens of generating ``rows`` rows of ``length`` tokens in batches of ``batch_size`` (the module
    docstring's step cost, summed over ``length - 1`` steps of every batch); 0 for no rows."""
    full, last = divmod(rows, batch_size)
    batches = [batch_size] * full + ([last] if last else [])
    per_row_token = DECODE_PENALTY * (size.decoder_parameters + size.head_parameters)
    return float(sum((length - 1) * per_row_token * (b + STEP_OVERHEAD_ROWS) for b in batches))


def plan_generation(
    requested: int, total_rows: int, length: int, size: ModelSize, share: float, batch_size: int = 16
) -> GenerationBudget:
    """The most generated rows (up to ``requested``) of ``length`` tokens, in batches of ``batch_size``, whose
    generation fits ``share`` of the quantization cost of ``total_rows`` rows.

    ``requested`` >= 0 generated rows, ``total_rows`` >= 1 calibration rows in all, ``length`` >= 2 tokens per
    row, ``share`` in [0, 1], ``batch_size`` >= 1. Raises :class:`CalibrationError` naming a value out of range.
    """
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise CalibrationError(f"default calibration: generation_share: expected a number in [0, 1], found {share!r}")
    if requested < 0 or total_rows < 1 or length < 2 or batch_size < 1:
        raise CalibrationError(
            f"generation budget: expected requested >= 0, total_rows >= 1, length >= 2, batch_size >= 1, found "
            f"{requested=}, {total_rows=}, {length=}, {batch_size=}"
        )
    quantize_cost = float(CALIBRATION_PASSES * size.decoder_parameters * total_rows * length)
    allowed = share * quantize_cost
    granted = 0
    while granted < requested and generation_cost(granted + 1, length, batch_size, size) <= allowed:
        granted += 1
    reason = None
    if granted < requested:
        one = generation_cost(1, length, batch_size, size) / quantize_cost
        reason = (
            f"{granted} of {requested} self-generated rows fit {share:.0%} of the estimated quantization cost "
            f"(one row alone costs {one:.1%} of it); the other {requested - granted} rows are documentation blocks"
        )
    return GenerationBudget(requested, granted, float(share), quantize_cost, allowed, reason)
