"""Perplexity over non-overlapping windows: tokens counted exactly, deterministic, matches a direct sum."""

from __future__ import annotations

import math

import pytest
import torch
from qhf.errors import CalibrationError
from qhf.perplexity import evaluate, perplexity, windows_of
from qhf.source import open_source
from qhf.tokenizer import default_bos, encode
from torch import nn


def test_windows_are_non_overlapping_and_keep_a_useful_tail() -> None:
    assert windows_of(list(range(10)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert windows_of(list(range(9)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(CalibrationError):
        windows_of([1, 2, 3], 1)


def test_windows_with_bos_hold_window_minus_one_stream_tokens() -> None:
    assert windows_of(list(range(10, 17)), 4, bos_id=0) == [[0, 10, 11, 12], [0, 13, 14, 15], [0, 16]]
    assert windows_of([5, 6], 2, bos_id=1) == [[1, 5], [1, 6]]


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


def test_bos_first_windows_match_direct_computation(tiny_dirs) -> None:
    model = open_source(tiny_dirs("llama")).materialize_all()
    ids = [int(i) for i in torch.randint(3, 300, (40,), generator=torch.Generator().manual_seed(5))]
    result = perplexity(model, ids, window=16, bos_id=0)
    plain = perplexity(model, ids, window=16)
    assert result.bos is True and plain.bos is False and result.as_dict()["bos"] is True
    assert result.tokens == 40 and result.windows == 3  # every stream token predicted, 15 + 15 + 10
    total = 0.0
    with torch.no_grad():
        for start in range(0, 40, 15):
            chunk = torch.tensor([[0, *ids[start : start + 15]]])
            logp = torch.log_softmax(model(chunk).logits[0, :-1].double(), -1)
            total -= float(logp.gather(1, chunk[0, 1:, None]).sum())
    assert result.perplexity == pytest.approx(math.exp(total / 40), rel=1e-9)
    assert result.perplexity != plain.perplexity


def test_evaluate_prepends_bos_exactly_when_the_tokenizer_does(tiny_dirs, tokenizer) -> None:
    from tiny_models import build_tokenizer
    from tokenizers.processors import TemplateProcessing

    model = open_source(tiny_dirs("llama")).materialize_all()
    text = "The interpreter reads a program and runs it, one statement after another. " * 4
    assert default_bos(tokenizer) is None  # no post-processor: text is encoded without BOS, as SmolLM2's
    plain = evaluate(model, tokenizer, text, window=16)
    assert plain.bos is False
    assert plain.perplexity == perplexity(model, encode(tokenizer, text), window=16).perplexity

    with_bos = build_tokenizer()  # the same vocabulary, with a template that prepends <s> (as Gemma 3's <bos>)
    bos_id = with_bos.bos_token_id
    with_bos.backend_tokenizer.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos_id)])
    assert default_bos(with_bos) == bos_id
    chosen = evaluate(model, with_bos, text, window=16)
    assert chosen.bos is True
    assert chosen.perplexity == perplexity(model, encode(with_bos, text), window=16, bos_id=bos_id).perplexity
    forced_off = evaluate(model, with_bos, text, window=16, bos=False)
    assert forced_off.bos is False and forced_off.perplexity == plain.perplexity
    assert evaluate(model, tokenizer, text, window=16, bos=True).perplexity == chosen.perplexity


def test_bos_asked_of_a_tokenizer_without_one_is_named(tiny_dirs) -> None:
    from tiny_models import build_tokenizer

    model = open_source(tiny_dirs("llama")).materialize_all()
    with pytest.raises(CalibrationError, match="no bos_token_id"):
        evaluate(model, build_tokenizer(with_specials=False), "some text to evaluate here", window=4, bos=True)
