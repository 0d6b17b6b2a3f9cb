"""The generation budget of the default mixture: the rule, the documentation fill and what is recorded."""

from __future__ import annotations

import pytest
import torch
from qhf.calibration import DefaultCalibration, build_mixture
from qhf.calibration.budget import (
    CALIBRATION_PASSES,
    DECODE_PENALTY,
    STEP_OVERHEAD_ROWS,
    ModelSize,
    generation_cost,
    plan_generation,
)
from qhf.corpus import bundled_docs
from qhf.errors import CalibrationError
from qhf.tokenizer import token_blocks
from tiny_models import tiny_config

SMOLLM2 = ModelSize(decoder_parameters=106_202_880, head_parameters=28_311_552)  # SmolLM2-135M's counts


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    torch.manual_seed(2)
    return AutoModelForCausalLM.from_config(tiny_config("llama"), dtype=torch.float32).eval()


def test_the_rule_is_the_documented_formula() -> None:
    per_row_token = DECODE_PENALTY * (SMOLLM2.decoder_parameters + SMOLLM2.head_parameters)
    assert generation_cost(16, 256, 16, SMOLLM2) == 255 * per_row_token * (16 + STEP_OVERHEAD_ROWS)
    assert generation_cost(20, 256, 16, SMOLLM2) == 255 * per_row_token * (16 + 4 + 2 * STEP_OVERHEAD_ROWS)
    assert generation_cost(0, 256, 16, SMOLLM2) == 0.0
    quick = plan_generation(16, 32, 256, SMOLLM2, 0.10)  # the quickstart's 16 + 16 rows x 256
    quantize = CALIBRATION_PASSES * SMOLLM2.decoder_parameters * 32 * 256
    assert quick.quantize_cost == quantize and quick.allowed == 0.10 * quantize
    assert quick.granted == 0 and generation_cost(1, 256, 16, SMOLLM2) > quick.allowed
    assert "0 of 16 self-generated rows fit 10%" in str(quick.reason) and "one row alone costs" in str(quick.reason)
    default = plan_generation(128, 256, 256, SMOLLM2, 0.10)  # quantize()'s default 128 + 128
    assert default.granted == 16
    assert generation_cost(16, 256, 16, SMOLLM2) <= default.allowed < generation_cost(17, 256, 16, SMOLLM2)


def test_everything_fits_a_large_share_and_nothing_fits_share_zero() -> None:
    everything = plan_generation(4, 400, 64, SMOLLM2, 1.0)
    assert everything.granted == 4 and everything.reason is None
    none = plan_generation(4, 8, 64, SMOLLM2, 0.0)
    assert none.granted == 0 and "0 of 4" in str(none.reason)


@pytest.mark.parametrize("share", [-0.1, 1.5, "10%", True])
def test_a_bad_share_is_a_named_error(share) -> None:
    with pytest.raises(CalibrationError, match="generation_share"):
        plan_generation(4, 8, 64, SMOLLM2, share)


def test_model_size_counts_decoder_and_head_from_shapes_only() -> None:
    from transformers import AutoModelForCausalLM

    config = tiny_config("llama")
    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(config)
    size = ModelSize.of(meta, "model.layers")
    assert size.head_parameters == config.vocab_size * config.hidden_size
    assert size.decoder_parameters == sum(p.numel() for p in meta.model.layers.parameters())


def test_budgeted_fills_the_rest_with_documentation_and_keeps_the_row_count(model, tokenizer) -> None:
    size = ModelSize.of(model, "model.layers")
    config, budget = DefaultCalibration(batch_size=4, prompts=("", "The")).budgeted(64, 16, size)
    assert budget is not None and 0 < budget.granted < 64
    assert (config.documentation_rows, config.self_generated_rows) == (128 - budget.granted, budget.granted)
    mixed = build_mixture(model, tokenizer, config, budget=budget)
    assert len(mixed.rows) == 128 and all(len(r) == 16 for r in mixed.rows)
    blocks = token_blocks(tokenizer, bundled_docs("calibration").texts, count=128 - budget.granted, length=16)
    assert [list(r) for r in mixed.rows[: 128 - budget.granted]] == blocks  # the old 64 blocks, then the fill
    assert mixed.meta["generation_budget"] == budget.as_meta()
    again = build_mixture(model, tokenizer, config, budget=budget)
    assert again.rows == mixed.rows and again.meta == mixed.meta  # deterministic: no clock in the decision


def test_explicit_rows_and_no_share_are_generated_as_asked(model) -> None:
    size = ModelSize.of(model, "model.layers")
    explicit, budget = DefaultCalibration(self_generated_rows=16).budgeted(16, 32, size)
    assert budget is None and explicit.self_generated_rows == 16
    unbudgeted, budget = DefaultCalibration(generation_share=None).budgeted(16, 32, size)
    assert budget is None and unbudgeted.self_generated_rows == 16


def test_none_fit_skips_generation_and_says_why(model, tokenizer) -> None:
    size = ModelSize.of(model, "model.layers")
    config, budget = DefaultCalibration().budgeted(2, 32, size)
    assert budget is not None and budget.granted == 0 and budget.reason
    mixed = build_mixture(None, tokenizer, config, budget=budget)  # no model needed: nothing is generated
    assert mixed.meta["self_generated_rows"] == 0 and mixed.meta["samples"] == 4
    assert mixed.meta["source"] == "pydoc_data.topics" and "0 of 2" in mixed.meta["generation_budget"]["reason"]


def test_documentation_too_short_for_the_fill_gives_fewer_rows_recorded(model, tokenizer, caplog) -> None:
    available = len(token_blocks(tokenizer, bundled_docs("calibration").texts, count=100_000, length=512))
    size = ModelSize.of(model, "model.layers")
    config, budget = DefaultCalibration(generation_share=0.0).budgeted(available - 1, 512, size)
    with caplog.at_level("WARNING"):
        mixed = build_mixture(None, tokenizer, config, budget=budget)
    assert len(mixed.rows) == available and mixed.meta["rows_short"]["missing"] == available - 2
    assert "rows fewer than asked" in caplog.text
