"""Calibration text sampled from the model itself: seeded temperature sampling from BOS and short prompts.

A data-free calibration source: the model writes its own calibration sequences, so they follow the
distribution the model was trained on rather than one narrow domain. Every sequence starts with the
tokenizer's BOS token followed by one of a fixed list of short, varied openers (the empty opener means
"BOS only"); sequence ``i`` uses opener ``i mod len(prompts)``. After its opener, each token is drawn from
``softmax(logits / temperature)`` restricted to the smallest set of tokens whose probability reaches
``top_p`` (nucleus sampling), by the inverse CDF at one uniform number per position. Special tokens
(EOS, pad, chat markers) are never drawn, so every sequence runs to exactly ``length`` tokens of plain text.

Reproducibility: sequence ``i`` takes its uniforms from its own ``torch.Generator`` seeded with
``seed * 1_000_003 + i`` (``length`` float64 values drawn up front, value ``j`` for position ``j``), so the
same seed, settings, model and batch size give the same tokens on every run, and a sequence does not
depend on the other sequences of its batch. (Different batch
sizes can change the logits in their last bits through the matrix kernels, and so, rarely, a draw.)

Sequences are generated ``batch_size`` at a time with a KV cache; all rows of a batch advance together
(a row still inside its opener is fed its opener token instead of its draw), so no padding is needed.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import CalibrationError
from ..tokenizer import encode
from .generation_progress import GenerationProgress

#: Short openers in many registers (narrative, letters, news, science, law, recipes, dialogue, poetry,
#: code, lists). They steer the first tokens only; the model writes the rest. "" is BOS alone.
DEFAULT_PROMPTS: tuple[str, ...] = (
    "",
    "The",
    "Once upon a time",
    "Dear Sir,",
    "In the year",
    "According to the report,",
    "The experiment showed that",
    "Chapter 1\n\n",
    "Q: How do I",
    "Ingredients:\n",
    '"Where are you going?" she asked.',
    "The court held that",
    "def main():\n",
    "Breaking news:",
    "I remember when",
    "The history of",
    "In mathematics,",
    "Step 1:",
    "My favourite",
    "It was late in the evening when",
    "The patient",
    "Here is a list of",
    "The village",
    "Thank you for",
)

ProgressCallback = Callable[[int, int, float], None]


@dataclass(frozen=True)
class GenerationSettings:
    """How self-generated sequences are sampled.

    ``count`` sequences of ``length`` tokens each (BOS and opener included); ``temperature`` > 0 divides
    the logits; ``top_p`` in (0, 1] is the nucleus mass (1 = the whole distribution); ``seed`` fixes every
    draw; ``batch_size`` sequences share one forward pass; ``prompts`` are the openers (cycled).
    """

    count: int
    length: int
    temperature: float = 1.0
    top_p: float = 0.95
    seed: int = 0
    batch_size: int = 16
    prompts: tuple[str, ...] = field(default=DEFAULT_PROMPTS)

    def validate(self) -> None:
        """Raise :class:`CalibrationError` naming the first field out of range."""
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 0:
            raise CalibrationError(f"self-generated calibration: count: expected an integer >= 0, found {self.count!r}")
        if isinstance(self.length, bool) or not isinstance(self.length, int) or self.length < 2:
            raise CalibrationError(
                f"self-generated calibration: length: expected an integer >= 2, found {self.length!r}"
            )
        if not self.temperature > 0:
            raise CalibrationError(f"self-generated calibration: temperature: expected > 0, found {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise CalibrationError(f"self-generated calibration: top_p: expected in (0, 1], found {self.top_p!r}")
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise CalibrationError(
                f"self-generated calibration: batch_size: expected an integer >= 1, found {self.batch_size!r}"
            )
        if not self.prompts or not all(isinstance(p, str) for p in self.prompts):
            raise CalibrationError("self-generated calibration: prompts: expected a non-empty sequence of strings")

    def as_meta(self) -> dict[str, Any]:
        """The settings as recorded in the checkpoint's metadata (prompts by count, not text)."""
        return {
            "count": self.count,
            "length": self.length,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "prompts": len(self.prompts),
        }


@dataclass(frozen=True)
class GeneratedSamples:
    """The sampled sequences (``rows``: ``count`` lists of ``length`` token ids), the wall time of
    sampling in seconds, and the number of tokens the model drew (opener tokens excluded)."""

    rows: tuple[tuple[int, ...], ...]
    seconds: float
    drawn_tokens: int
    settings: GenerationSettings


def _openers(tokenizer: Any, settings: GenerationSettings) -> list[list[int]]:
    """The starting ids of every opener: BOS (when the tokenizer has one) then the opener's tokens."""
    bos = getattr(tokenizer, "bos_token_id", None)
    start = [int(bos)] if bos is not None else []
    openers = []
    for prompt in settings.prompts:
        ids = start + (encode(tokenizer, prompt) if prompt else [])
        if not ids:
            raise CalibrationError(
                "self-generated calibration: the tokenizer has no BOS token, so an empty opener gives nothing "
                "to start from; remove '' from prompts"
            )
        openers.append(ids[: settings.length - 1])  # at least one drawn token per sequence
    return openers


def _banned_ids(tokenizer: Any, vocab: int) -> torch.Tensor:
    ids = {int(i) for i in getattr(tokenizer, "all_special_ids", []) or []}
    for attr in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"):
        value = getattr(tokenizer, attr, None)
        if value is not None:
            ids.add(int(value))
    return torch.tensor(sorted(i for i in ids if 0 <= i < vocab), dtype=torch.long)


#: Candidates examined first per row by :func:`nucleus_draw`; rows whose nucleus is larger retry with 8x more.
FIRST_CANDIDATES = 256


def nucleus_draw(probs: torch.Tensor, top_p: float, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of ``probs`` (rows x vocab, each row summing to 1), drawn from the row's nucleus.

    The nucleus is the smallest set of most probable tokens whose mass reaches ``top_p`` (a token is kept
    when the mass strictly above it is below ``top_p``); the draw is the inverse CDF of the kept
    probabilities, renormalized, at ``uniforms`` (rows, values in [0, 1)). No full-vocabulary sort: each row
    looks at its :data:`FIRST_CANDIDATES` most probable tokens and only rows whose nucleus is larger look
    further (8x more each time, up to the whole vocabulary). Tokens of probability 0 are never drawn.
    Returns the token ids (rows,) as int64 on ``probs``' device.
    """
    rows, vocab = probs.shape
    targets = uniforms.to(device=probs.device, dtype=probs.dtype)
    if top_p >= 1.0:
        return _inverse_cdf(probs, targets, None)
    tokens = torch.empty(rows, dtype=torch.long, device=probs.device)
    pending = torch.arange(rows, device=probs.device)
    k = min(FIRST_CANDIDATES, vocab)
    while pending.numel():
        values, order = torch.topk(probs.index_select(0, pending), k, dim=-1)  # descending
        covered = torch.cumsum(values, dim=-1)
        done = covered[:, -1] >= top_p if k < vocab else torch.ones_like(pending, dtype=torch.bool)
        if bool(done.any()):
            kept = torch.where((covered - values)[done] < top_p, values[done], torch.zeros_like(values[done]))
            tokens[pending[done]] = _inverse_cdf(kept, targets[pending[done]], order[done])
        pending = pending[~done]
        k = min(vocab, k * 8)
    return tokens


def _inverse_cdf(weights: torch.Tensor, uniforms: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
    """Per row, the first index whose running sum of ``weights`` exceeds ``uniform x total`` (mapped through
    ``order`` when given): a draw proportional to ``weights`` (rows x n, >= 0) without sampling kernels."""
    cdf = torch.cumsum(weights, dim=-1)
    target = (uniforms * cdf[:, -1]).unsqueeze(-1)
    index = torch.searchsorted(cdf, target, right=True).clamp_(max=weights.shape[-1] - 1)
    return (index if order is None else order.gather(-1, index)).squeeze(-1)


def _cache_keyword(model: nn.Module) -> str:
    """The forward keyword (and output attribute) of the KV cache: ``cache`` in newer transformers,
    ``past_key_values`` before."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _generate_batch(
    model: nn.Module,
    openers: Sequence[list[int]],
    generators: Sequence[torch.Generator],
    settings: GenerationSettings,
    banned: torch.Tensor,
    device: torch.device,
    on_step: Callable[[], None] | None = None,
) -> list[list[int]]:
    """Rows (len(openers) lists of ``settings.length`` ids); row ``r`` draws position ``j`` from the uniform
    ``torch.rand(length, generator=generators[r], dtype=float64)[j]``, so a row depends on its generator
    and its own logits only, not on its neighbours in the batch. ``on_step()`` is called after every
    decode step (``length - 1`` per batch)."""
    length = settings.length
    tokens = torch.full((len(openers), length), -1, dtype=torch.long)
    for r, opener in enumerate(openers):
        tokens[r, : len(opener)] = torch.tensor(opener, dtype=torch.long)
    forced = tokens >= 0  # opener positions: fed as they are, nothing drawn
    uniforms = torch.stack([torch.rand(length, generator=g, dtype=torch.float64) for g in generators])
    banned = banned.to(device)
    keyword = _cache_keyword(model)
    feed = tokens[:, :1].to(device)
    past = None
    for position in range(1, length):
        out = model(input_ids=feed, use_cache=True, **({keyword: past} if past is not None else {}))
        past = getattr(out, keyword, None)
        if past is None:
            raise CalibrationError(f"self-generated calibration: {type(model).__name__} returned no KV cache")
        draw = ~forced[:, position]
        if bool(draw.any()):
            logits = out.logits[:, -1, :][draw.to(device)].float()
            if banned.numel():
                logits.index_fill_(-1, banned, float("-inf"))
            probs = torch.softmax(logits / settings.temperature, dim=-1)
            tokens[draw, position] = nucleus_draw(probs, settings.top_p, uniforms[draw, position]).cpu()
        feed = tokens[:, position : position + 1].to(device)
        if on_step is not None:
            on_step()
    return tokens.tolist()


def generate_samples(
    model: nn.Module,
    tokenizer: Any,
    settings: GenerationSettings,
    *,
    progress: bool = False,
    on_progress: ProgressCallback | None = None,
) -> GeneratedSamples:
    """Sample ``settings.count`` sequences from ``model`` (a transformers causal LM with real weights).

    ``progress`` prints lines to stderr (:class:`~qhf.calibration.generation_progress.GenerationProgress`:
    the first estimate after the first decode step, then elapsed and estimated time left at least every
    10 s and after every batch); ``on_progress(done, total, elapsed_seconds)`` is called after every batch.
    """
    settings.validate()
    start = time.perf_counter()
    if settings.count == 0:
        return GeneratedSamples((), 0.0, 0, settings)
    openers = _openers(tokenizer, settings)
    head: Any = model.get_output_embeddings()  # type: ignore[operator]
    if head is None:
        raise CalibrationError(f"self-generated calibration: {type(model).__name__} has no output embeddings")
    vocab = int(head.weight.shape[0])
    banned = _banned_ids(tokenizer, vocab)
    if banned.numel() >= vocab:
        raise CalibrationError("self-generated calibration: every token of the vocabulary is a special token")
    try:
        device = next(p.device for p in model.parameters())
    except StopIteration:
        device = torch.device("cpu")
    if device.type == "meta":
        raise CalibrationError("self-generated calibration: the model's weights are not loaded (meta device)")
    was_training = model.training
    model.eval()
    rows: list[tuple[int, ...]] = []
    drawn = 0
    batches = -(-settings.count // settings.batch_size)
    lines = GenerationProgress(settings.count, batches, settings.length - 1) if progress else None
    try:
        with torch.inference_mode():
            for first in range(0, settings.count, settings.batch_size):
                index = range(first, min(first + settings.batch_size, settings.count))
                batch_openers = [openers[i % len(openers)] for i in index]
                gens = [torch.Generator().manual_seed(settings.seed * 1_000_003 + i) for i in index]
                for row, opener in zip(
                    _generate_batch(
                        model, batch_openers, gens, settings, banned, device, lines.step if lines else None
                    ),
                    batch_openers,
                    strict=True,
                ):
                    rows.append(tuple(row))
                    drawn += len(row) - len(opener)
                elapsed = time.perf_counter() - start
                if on_progress is not None:
                    on_progress(len(rows), settings.count, elapsed)
                if lines is not None:
                    lines.batch(len(rows))
    finally:
        model.train(was_training)
    return GeneratedSamples(tuple(rows), time.perf_counter() - start, drawn, settings)
