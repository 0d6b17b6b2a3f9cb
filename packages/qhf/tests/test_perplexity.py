"""Perplexity over non-overlapping windows: tokens counted exactly, deterministic, matches a direct sum."""

from __future__ import annotations

import math

import pytest
import torch
from qhf.errors import CalibrationError
from qhf.perplexity import perplexity, windows_of
from qhf.source import open_source
from torch import nn


def test_windows_are_non_overlapping_and_keep_a_useful_tail() -> None:
    assert windows_of(list(range(10)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert windows_of(list(range(9)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(CalibrationError):
        windows_of([1, 2, 3], 1)


class Uniform(nn.Module):
    """A model predicting every token with equal probability: perplexity equals the vocabulary size."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.p = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, use_cache=False):
        logits = torch.zeros(*input_ids.shape, self.vocab) + self.p
        return type("Out", (), {"logits": logits})()


def test_uniform_model_has_vocab_perplexity() -> None:
    result = perplexity(Uniform(50), list(range(23)), window=5)
    assert result.tokens == 4 * 4 + 2 and result.windows == 5
    assert result.perplexity == pytest.approx(50.0, rel=1e-12)


def test_matches_direct_computation_and_is_deterministic(tiny_dirs) -> None:
    model = open_source(tiny_dirs("llama")).materialize_all()
    ids = [int(i) for i in torch.randint(0, 300, (70,), generator=torch.Generator().manual_seed(3))]
    result = perplexity(model, ids, window=32)
    assert result.tokens == 31 + 31 + 5 and result.windows == 3
    total = 0.0
    with torch.no_grad():
        for start in range(0, 70, 32):
            chunk = torch.tensor([ids[start : start + 32]])
            logp = torch.log_softmax(model(chunk).logits[0, :-1].double(), -1)
            total -= float(logp.gather(1, chunk[0, 1:, None]).sum())
    assert result.perplexity == pytest.approx(math.exp(total / result.tokens), rel=1e-9)
    assert perplexity(model, ids, window=32).perplexity == result.perplexity


def test_too_short() -> None:
    with pytest.raises(CalibrationError, match="fewer than 2"):
        perplexity(Uniform(5), [1], window=4)
