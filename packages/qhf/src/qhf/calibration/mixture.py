"""The default calibration set: the model's own samples mixed with CPython's bundled documentation.

:class:`DefaultCalibration` says how many documentation rows (blocks of the documentation's calibration
slice: :func:`qhf.corpus.bundled_docs`, cut by :func:`qhf.tokenizer.token_blocks`), how many rows the model
writes itself (:mod:`qhf.calibration.self_generated`), how many tokens per row and how it samples. With
``self_generated_rows=0`` this is exactly the documentation-only default of earlier versions; with
``documentation_rows=0`` it is the model's samples alone.

Row accounting: ``samples = documentation_rows + self_generated_rows``; the rows are the documentation
blocks first, then the generated ones. Every row is ``length`` tokens.

The generation budget (:mod:`qhf.calibration.budget`): when ``self_generated_rows`` is left None, only the
generated rows that fit ``generation_share`` of the estimated quantization cost are generated and the other
requested rows are further documentation blocks (the row count stays); the decision is recorded under
``generation_budget``. Rows set explicitly are generated as asked.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field, replace
from typing import Any

from torch import nn

from ..corpus import bundled_docs, corpus_identity
from ..errors import CalibrationError
from ..tokenizer import token_blocks
from .budget import GENERATION_SHARE, GenerationBudget, ModelSize, plan_generation
from .self_generated import DEFAULT_PROMPTS, GeneratedSamples, GenerationSettings, generate_samples

SOURCE_NAME = "self-generated + pydoc_data.topics"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DefaultCalibration:
    """Settings of the default calibration mixture (pass one as ``quantize(calibration=...)`` to change them).

    ``documentation_rows``: blocks cut from the bundled docs; ``self_generated_rows``: rows the model
    samples itself; ``length``: tokens per row. None takes ``quantize``'s ``samples`` (for both row counts)
    and ``length``: the default keeps every documentation block a documentation-only run would use and adds
    as many generated rows. ``temperature``, ``top_p``, ``seed``, ``prompts``: the sampling (see
    :class:`GenerationSettings`); ``batch_size``: sequences generated per forward pass.
    ``generation_share``: the generation budget, a share of the estimated quantization cost
    (:mod:`qhf.calibration.budget`), applied when ``self_generated_rows`` is None; None: no budget.
    ``cache``: reuse and store the generated rows in the calibration cache
    (:mod:`qhf.calibration.sample_cache`).
    """

    documentation_rows: int | None = None
    self_generated_rows: int | None = None
    length: int | None = None
    temperature: float = 1.0
    top_p: float = 0.95
    seed: int = 0
    batch_size: int = 16
    prompts: tuple[str, ...] = field(default=DEFAULT_PROMPTS)
    generation_share: float | None = GENERATION_SHARE
    cache: bool = True

    def budgeted(
        self, samples: int, length: int, size: ModelSize
    ) -> tuple[DefaultCalibration, GenerationBudget | None]:
        """:meth:`resolved`, then, when the generated rows were left to the default and a share is set, only the
        rows that fit the budget are generated and the rest become documentation rows; returns the resolved
        settings and the budget's decision (None when no budget applied)."""
        config = self.resolved(samples, length)
        if self.self_generated_rows is not None or self.generation_share is None:
            return config, None
        docs, requested = config.split()
        budget = plan_generation(
            requested, docs + requested, int(config.length or 0), size, self.generation_share, self.batch_size
        )
        fill = requested - budget.granted
        return replace(config, documentation_rows=docs + fill, self_generated_rows=budget.granted), budget

    def resolved(self, samples: int, length: int) -> DefaultCalibration:
        """A copy whose row counts and ``length`` are filled from the given defaults where None."""
        return replace(
            self,
            documentation_rows=self.documentation_rows if self.documentation_rows is not None else samples,
            self_generated_rows=self.self_generated_rows if self.self_generated_rows is not None else samples,
            length=self.length if self.length is not None else length,
            prompts=tuple(self.prompts),
        )

    def split(self) -> tuple[int, int]:
        """``(documentation_rows, generated_rows)``; raises :class:`CalibrationError` on bad settings."""
        counts = (("documentation_rows", self.documentation_rows), ("self_generated_rows", self.self_generated_rows))
        for name, value in counts:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CalibrationError(f"default calibration: {name}: expected an integer >= 0, found {value!r}")
        docs, generated = int(self.documentation_rows or 0), int(self.self_generated_rows or 0)
        if docs + generated < 1:
            raise CalibrationError(
                "default calibration: documentation_rows + self_generated_rows: expected >= 1, found 0"
            )
        return docs, generated

    def generation(self) -> GenerationSettings:
        _, generated = self.split()
        if self.length is None:
            raise CalibrationError("default calibration: length: expected an integer >= 2, found None")
        return GenerationSettings(
            count=generated,
            length=self.length,
            temperature=self.temperature,
            top_p=self.top_p,
            seed=self.seed,
            batch_size=self.batch_size,
            prompts=tuple(self.prompts),
        )


@dataclass(frozen=True)
class MixedCalibration:
    """The built mixture: ``rows`` (token-id lists, documentation first), ``meta`` (what goes into the
    saved config: deterministic for a given seed, no times), ``generation_seconds`` (sampling time) and
    ``cache`` (where the generated rows came from: ``"hit"``, ``"miss"``, ``"off"``, None without any)."""

    rows: tuple[tuple[int, ...], ...]
    meta: dict[str, Any]
    generation_seconds: float
    generated: GeneratedSamples | None
    cache: str | None = None


def tokens_digest(rows: tuple[tuple[int, ...], ...]) -> str:
    """SHA-256 over the rows' token ids (row boundaries included): equal digests mean equal calibration."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(len(row).to_bytes(4, "little"))
        for token in row:
            digest.update(int(token).to_bytes(4, "little"))
    return digest.hexdigest()


def build_mixture(
    model: nn.Module | None,
    tokenizer: Any,
    config: DefaultCalibration,
    *,
    progress: bool = False,
    budget: GenerationBudget | None = None,
    generated: GeneratedSamples | None = None,
    cache: str | None = None,
) -> MixedCalibration:
    """Build the rows of ``config`` (resolved: ``samples`` and ``length`` set).

    ``model`` needs real weights when any row is self-generated and ``generated`` (rows already sampled,
    e.g. read from the cache) is not given (it may be None when ``self_generated_rows`` is 0). Fewer
    documentation rows than asked (text too short for ``length``) is a :class:`CalibrationError`, since the
    recorded mixture would otherwise be wrong. ``budget``: the generation budget's decision, recorded;
    ``cache``: where ``generated`` came from, kept on the result.
    """
    docs_rows, gen_rows = config.split()
    short: dict[str, Any] | None = None
    settings = config.generation()
    settings.validate()
    rows: list[tuple[int, ...]] = []
    if docs_rows:
        blocks = token_blocks(tokenizer, bundled_docs("calibration").texts, count=docs_rows, length=settings.length)
        fill = budget.requested - budget.granted if budget is not None else 0
        if docs_rows - fill <= len(blocks) < docs_rows:
            short = {
                "missing": docs_rows - len(blocks),
                "reason": f"the documentation gives only {len(blocks)} "
                f"blocks of {settings.length} tokens for the {fill} rows the generation budget left to it",
            }
            log.warning("default calibration: %d rows fewer than asked: %s", short["missing"], short["reason"])
            docs_rows = len(blocks)
        if len(blocks) < docs_rows:
            raise CalibrationError(
                f"default calibration: the documentation gives {len(blocks)} blocks of {settings.length} tokens, "
                f"fewer than the {docs_rows} asked; lower documentation_rows or length"
            )
        rows.extend(tuple(b) for b in blocks)
    if gen_rows:
        if generated is None:
            if model is None:
                raise CalibrationError("default calibration: self-generated rows need the model; none was given")
            generated = generate_samples(model, tokenizer, settings, progress=progress)
        if generated.settings != settings:
            raise CalibrationError("default calibration: the generated rows were sampled with other settings")
        rows.extend(generated.rows)
    else:
        generated = None
    frozen = tuple(rows)
    docs = corpus_identity()
    meta: dict[str, Any] = {
        "source": SOURCE_NAME if gen_rows and docs_rows else ("self-generated" if gen_rows else docs["source"]),
        "samples": len(frozen),
        "length": settings.length,
        "self_generated_rows": gen_rows,
        "documentation_rows": docs_rows,
        **{k: v for k, v in settings.as_meta().items() if k not in ("count", "length")},
        "python": docs["python"],
        "sha256": docs["sha256"],
        "tokens_sha256": tokens_digest(frozen),
    }
    if budget is not None:
        meta["generation_budget"] = budget.as_meta()
    if short is not None:
        meta["rows_short"] = short
    return MixedCalibration(frozen, meta, generated.seconds if generated is not None else 0.0, generated, cache)
