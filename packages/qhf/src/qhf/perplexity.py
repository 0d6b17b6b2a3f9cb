"""Deterministic perplexity over non-overlapping windows of one token stream.

The stream is cut into consecutive windows of ``window`` tokens (the last, shorter one is kept when it
has at least two tokens). Inside a window every token after the first is predicted from the ones before
it; windows never see each other. The result counts exactly the predicted tokens. Negative
log-likelihoods are summed in float64, one window at a time, so the number does not depend on batching.

With a BOS id (``bos_id``), every window is that token followed by ``window - 1`` stream tokens: each stream
token of the window is predicted (the first from BOS alone), so a full window still predicts ``window - 1``
tokens and the model still sees ``window`` positions. :func:`evaluate` prepends BOS exactly when the
tokenizer's own default encoding does (:func:`qhf.tokenizer.default_bos`): Gemma 3's does
(``tokenizer.ggml.add_bos_token`` true), SmolLM2's does not, so SmolLM2's numbers are those without BOS.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .errors import CalibrationError


@dataclass(frozen=True)
class PerplexityResult:
    """``perplexity = exp(nll / tokens)``; ``tokens``: predicted tokens counted; ``windows``: windows run."""

    perplexity: float
    nll: float
    tokens: int
    windows: int
    window: int
    seconds: float
    bos: bool = False

    def as_dict(self) -> dict[str, float | int | bool]:
        """Every field; ``bos``: whether each window started with the tokenizer's BOS token."""
        return {
            "perplexity": self.perplexity,
            "nll": self.nll,
            "tokens": self.tokens,
            "windows": self.windows,
            "window": self.window,
            "seconds": self.seconds,
            "bos": self.bos,
        }


def windows_of(ids: Sequence[int], window: int, bos_id: int | None = None) -> list[list[int]]:
    """Non-overlapping windows of ``window`` tokens; a last shorter one is kept if it has >= 2 tokens.
    With ``bos_id`` each window is ``[bos_id]`` + the next ``window - 1`` stream tokens (a last window of
    BOS and one stream token is kept)."""
    if window < 2:
        raise CalibrationError(f"perplexity: window must be >= 2 tokens, found {window}")
    if bos_id is not None:
        body = window - 1
        return [[int(bos_id), *ids[i : i + body]] for i in range(0, len(ids), body)]
    out = [list(ids[i : i + window]) for i in range(0, len(ids), window)]
    return [w for w in out if len(w) >= 2]


@torch.no_grad()
def perplexity(
    model: nn.Module,
    ids: Sequence[int],
    *,
    window: int = 512,
    max_windows: int | None = None,
    bos_id: int | None = None,
) -> PerplexityResult:
    """Perplexity of ``model`` (a causal LM returning ``.logits``) on token ``ids``; ``bos_id``: a token
    every window starts with (not counted as predicted; see the module docstring)."""
    chunks = windows_of(ids, window, bos_id)
    if max_windows is not None:
        chunks = chunks[:max_windows]
    if not chunks:
        raise CalibrationError(f"perplexity: the evaluation text gives {len(ids)} tokens, fewer than 2")
    device = next((p.device for p in model.parameters() if p.device.type != "meta"), torch.device("cpu"))
    start = time.perf_counter()
    total = 0.0
    counted = 0
    was_training = model.training
    model.eval()
    for chunk in chunks:
        inputs = torch.tensor([chunk], dtype=torch.long, device=device)
        logits = model(input_ids=inputs, use_cache=False).logits[0, :-1].double()
        nll = nn.functional.cross_entropy(logits, inputs[0, 1:], reduction="sum")
        total += float(nll)
        counted += len(chunk) - 1
    model.train(was_training)
    return PerplexityResult(
        perplexity=math.exp(total / counted),
        nll=total,
        tokens=counted,
        windows=len(chunks),
        window=window,
        seconds=time.perf_counter() - start,
        bos=bos_id is not None,
    )


def evaluate(
    model: nn.Module,
    tokenizer: Any,
    text: str | Sequence[int] | None = None,
    *,
    window: int = 512,
    max_windows: int | None = None,
    bos: bool | None = None,
) -> PerplexityResult:
    """Perplexity on ``text`` (a string, token ids, or None for the bundled docs' evaluation slice).

    ``bos``: start every window with the tokenizer's BOS token; None (default) does what the tokenizer's own
    default encoding does (:func:`qhf.tokenizer.default_bos`). The result's ``bos`` records the choice."""
    from .corpus import bundled_docs
    from .tokenizer import default_bos, encode

    if text is None:
        ids = encode(tokenizer, bundled_docs("evaluation").joined())
    elif isinstance(text, str):
        ids = encode(tokenizer, text)
    else:
        ids = [int(i) for i in text]
    bos_id = default_bos(tokenizer) if bos is None else (_bos_id(tokenizer) if bos else None)
    return perplexity(model, ids, window=window, max_windows=max_windows, bos_id=bos_id)


def _bos_id(tokenizer: Any) -> int:
    """The tokenizer's BOS id (``bos=True`` asked for it); a tokenizer without one is a named error."""
    bos_id = getattr(tokenizer, "bos_token_id", None)
    if bos_id is None:
        raise CalibrationError(
            f"perplexity: bos=True but tokenizer {type(tokenizer).__name__} has no bos_token_id; pass bos=False"
        )
    return int(bos_id)
