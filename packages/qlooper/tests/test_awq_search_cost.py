"""AWQ's scale-search cost options: the token budget of inspected-block replays and the Gram-form loss."""

import pytest
import torch
from loop_helpers import assert_packed_roundtrip
from qalgos.spec import QuantSpec
from qlooper import quantize_model
from qlooper.errors import ProcessorError
from qlooper.processors.awq import DEFAULT_SEARCH_TOKENS, AWQProcessor, spread_calls
from toy_models import DENSE, ToyDecoder, toy_calibration

SPEC4 = QuantSpec(bits=4, group_size=32, sym=False)


def calls(sizes: list[int]) -> list[tuple[tuple[torch.Tensor], dict]]:
    """Recorded calls whose hidden states hold ``sizes[i]`` tokens (``[1, size, 8]``)."""
    return [((torch.zeros(1, n, 8),), {}) for n in sizes]


def test_spread_calls_keeps_every_call_that_fits() -> None:
    recorded = calls([10, 10, 10])
    assert spread_calls(recorded, 30) is recorded
    assert spread_calls(recorded, None) is recorded


def test_spread_calls_picks_evenly_spaced_calls_first_and_last_included() -> None:
    recorded = calls([16] * 9)
    picked = spread_calls(recorded, 48)  # 3 of 9 calls fit
    assert [next(i for i, r in enumerate(recorded) if r is c) for c in picked] == [0, 4, 8]
    (only,) = spread_calls(recorded, 5)  # less than one call: the first
    assert only is recorded[0]


def test_spread_calls_counts_tokens_over_the_batch() -> None:
    recorded = [((torch.zeros(4, 16, 8),), {}) for _ in range(4)]  # 64 tokens each
    assert len(spread_calls(recorded, 128)) == 2


def count_calls(module: torch.nn.Module) -> list[int]:
    counter = [0]

    def hook(*_args: object) -> None:
        counter[0] += 1

    module.register_forward_hook(hook)
    return counter


def test_a_token_budget_replays_fewer_calls_and_still_quantizes() -> None:
    full, budget = ToyDecoder(), ToyDecoder()
    full_count, budget_count = count_calls(full.model.layers[0].mlp), count_calls(budget.model.layers[0].mlp)
    quantize_model(full, DENSE, toy_calibration(), None, AWQProcessor(SPEC4, search_tokens=None), format="gemm")
    run = quantize_model(budget, DENSE, toy_calibration(), None, AWQProcessor(SPEC4, search_tokens=64), format="gemm")
    assert budget_count[0] < full_count[0]
    assert_packed_roundtrip(run, budget)
    assert "scale_ratio=" in run.report_for("model.layers.0.mlp.up_proj").notes


def test_gram_form_chooses_the_forward_searchs_ratios() -> None:
    gram, forward = ToyDecoder(), ToyDecoder()
    a = quantize_model(gram, DENSE, toy_calibration(), None, AWQProcessor(SPEC4, search_tokens=None), format="gemm")
    b = quantize_model(
        forward, DENSE, toy_calibration(), None, AWQProcessor(SPEC4, search_tokens=None, gram_loss=False), format="gemm"
    )
    for name in ("model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"):
        ratio = [n for n in a.report_for(name).notes.split("; ") if n.startswith("scale_ratio=")]
        assert ratio and ratio == [n for n in b.report_for(name).notes.split("; ") if n.startswith("scale_ratio=")]


def test_search_options_are_part_of_the_identity_and_checked() -> None:
    assert "search_tokens" not in AWQProcessor(SPEC4, search_tokens=None, gram_loss=False).describe()
    described = AWQProcessor(SPEC4).describe()
    assert described["search_tokens"] == DEFAULT_SEARCH_TOKENS and described["gram_loss"] is True
    with pytest.raises(ProcessorError, match="search_tokens: expected a positive token count"):
        AWQProcessor(SPEC4, search_tokens=0)


def test_the_report_says_how_many_tokens_each_search_scored() -> None:
    run = quantize_model(
        ToyDecoder(), DENSE, toy_calibration(), None, AWQProcessor(SPEC4, search_tokens=64), format="gemm"
    )
    total = toy_calibration().total_tokens
    assert f"scale_tokens={total} (gram)" in run.report_for("model.layers.0.mlp.down_proj").notes
    up = [n for n in run.report_for("model.layers.0.mlp.up_proj").notes.split("; ") if n.startswith("scale_tokens=")]
    assert up and 0 < int(up[0].split("=")[1]) < total
