"""The calibration input of one ``QuantModel.quantize`` run: the caller's data (or the default mixture) prepared
for qlooper, and what the run records about it.

The default mixture (:class:`~qhf.calibration.DefaultCalibration`) is built from the source and its tokenizer;
its record (counts, settings, text and token hashes) is a fact of the run, written to the stored config's
``meta.calibration`` by the checkpoint writer, not a quantization setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import StateError
from ..tokenizer import ensure_padding

if TYPE_CHECKING:
    from ..source import OpenedSource


@dataclass(frozen=True)
class CalibrationInput:
    """``prepared``: qlooper's ``CalibrationData`` (rows, batches, masks); ``source``: ``"user"`` or the default
    mixture's record with its ``generation_seconds`` and ``cache`` (``"hit"``: the generated rows came from the
    calibration cache; ``"miss"``: generated and stored; ``"off"``; None: no generated rows), the summary's
    ``calibration_source``; ``record``: the
    default mixture's record for ``meta.calibration`` (None for the caller's data); ``tokenizer_note``: what
    :func:`~qhf.tokenizer.ensure_padding` changed to pad batches, if anything."""

    prepared: Any
    source: dict[str, Any] | str
    record: dict[str, Any] | None
    tokenizer_note: str | None


def calibration_input(
    source: OpenedSource,
    tokenizer: Any,
    data: Any,
    *,
    samples: int,
    length: int,
    batch_size: int,
    progress: bool = False,
) -> CalibrationInput:
    """Prepare ``data`` (see ``QuantModel.quantize``) for the loop; raises :class:`StateError` when the default
    mixture or ``batch_size > 1`` needs a tokenizer and there is none."""
    from qlooper.calibration import prepare_calibration

    from .mixture import DefaultCalibration
    from .source_default import default_calibration, size_of

    record: dict[str, Any] | None = None
    used: dict[str, Any] | str = "user"
    if data is None or isinstance(data, DefaultCalibration):
        if tokenizer is None:
            raise StateError("quantize: the default calibration text needs a tokenizer; pass tokenizer= to load")
        config, budget = (data or DefaultCalibration()).budgeted(samples, length, size_of(source))
        mixed = default_calibration(source, tokenizer, config, progress=progress, budget=budget)
        data = [list(row) for row in mixed.rows]
        used = {**mixed.meta, "generation_seconds": round(mixed.generation_seconds, 3), "cache": mixed.cache}
        record = dict(mixed.meta)
    note = None
    if batch_size > 1:  # batches of unequal rows are padded: the tokenizer must be able to
        if tokenizer is None:
            raise StateError("quantize: batch_size > 1 needs a tokenizer to pad with; pass tokenizer= to load")
        note = ensure_padding(tokenizer) or None
    pad = getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None
    chat = None
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):

        def chat(messages: list[dict[str, str]]) -> str:
            return str(tokenizer.apply_chat_template(messages, tokenize=False))

    prepared = prepare_calibration(
        data,
        tokenizer=(lambda text: [int(i) for i in tokenizer(text)["input_ids"]]) if tokenizer is not None else None,
        chat_template=chat,
        max_length=getattr(source.config, "max_position_embeddings", None),
        batch_size=batch_size,
        pad_token_id=int(pad) if pad is not None else 0,
        padding_side=getattr(tokenizer, "padding_side", "right") or "right",
    )
    return CalibrationInput(prepared, used, record, note)
