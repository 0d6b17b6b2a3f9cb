"""The default calibration mixture: row accounting, documentation rows, metadata, and the quantize/save wiring."""

from __future__ import annotations

import json

import pytest
import qhf
import torch
from qhf.calibration import DefaultCalibration, build_mixture, tokens_digest
from qhf.corpus import bundled_docs
from qhf.errors import CalibrationError
from qhf.tokenizer import token_blocks
from tiny_models import tiny_config

SMALL = dict(batch_size=4, prompts=("", "The"))


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    return AutoModelForCausalLM.from_config(tiny_config("llama"), dtype=torch.float32).eval()


@pytest.mark.parametrize(("docs", "generated"), [(7, 3), (3, 4), (0, 4)])
def test_row_accounting(model, tokenizer, docs: int, generated: int) -> None:
    samples = docs + generated
    config = DefaultCalibration(documentation_rows=docs, self_generated_rows=generated, length=20, **SMALL)
    mixed = build_mixture(model, tokenizer, config)
    assert config.split() == (docs, generated)
    assert len(mixed.rows) == samples and all(len(r) == 20 for r in mixed.rows)
    assert mixed.meta["documentation_rows"] == docs and mixed.meta["self_generated_rows"] == generated
    assert mixed.meta["samples"] == samples and mixed.meta["length"] == 20
    expected_docs = token_blocks(tokenizer, bundled_docs("calibration").texts, count=docs, length=20) if docs else []
    assert [list(r) for r in mixed.rows[:docs]] == expected_docs  # documentation first, exactly the old default
    assert mixed.generated is not None and mixed.rows[docs:] == mixed.generated.rows
    assert mixed.meta["tokens_sha256"] == tokens_digest(mixed.rows)


def test_documentation_only_needs_no_model(tokenizer) -> None:
    mixed = build_mixture(None, tokenizer, DefaultCalibration(documentation_rows=3, self_generated_rows=0, length=16))
    assert mixed.meta["source"] == "pydoc_data.topics" and mixed.generated is None
    assert mixed.generation_seconds == 0.0
    assert [list(r) for r in mixed.rows] == token_blocks(
        tokenizer, bundled_docs("calibration").texts, count=3, length=16
    )


def test_meta_is_deterministic_and_follows_the_seed(model, tokenizer) -> None:
    config = DefaultCalibration(length=16, seed=5, **SMALL).resolved(2, 99)
    assert (config.documentation_rows, config.self_generated_rows, config.length) == (2, 2, 16)
    a, b = build_mixture(model, tokenizer, config), build_mixture(model, tokenizer, config)
    assert a.rows == b.rows and a.meta == b.meta
    c = build_mixture(
        model, tokenizer, DefaultCalibration(documentation_rows=2, self_generated_rows=2, length=16, seed=6, **SMALL)
    )
    assert c.rows[:2] == a.rows[:2] and c.rows[2:] != a.rows[2:]  # docs rows fixed, samples follow the seed
    assert c.meta["tokens_sha256"] != a.meta["tokens_sha256"]
    assert a.meta["seed"] == 5 and a.meta["temperature"] == 1.0 and a.meta["top_p"] == 0.95
    assert a.meta["prompts"] == 2 and a.meta["source"] == "self-generated + pydoc_data.topics"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"self_generated_rows": -1}, "self_generated_rows"),
        ({"documentation_rows": 1.5}, "documentation_rows"),
        ({"documentation_rows": 0, "self_generated_rows": 0}, "expected >= 1"),
    ],
)
def test_bad_mixture_names_the_field(tokenizer, kwargs: dict, field: str) -> None:
    config = DefaultCalibration(**{"documentation_rows": 2, "self_generated_rows": 2, "length": 16, **kwargs})
    with pytest.raises(CalibrationError, match=field):
        build_mixture(None, tokenizer, config)


def test_too_little_documentation_is_an_error_not_a_silent_shortfall(tokenizer) -> None:
    with pytest.raises(CalibrationError, match="documentation gives"):
        build_mixture(None, tokenizer, DefaultCalibration(documentation_rows=100_000, self_generated_rows=0, length=64))


def test_quantize_default_records_the_mixture_in_summary_and_saved_config(tmp_path, tiny_dirs) -> None:
    from qhf.calibration.budget import ModelSize, plan_generation

    qm = qhf.load(tiny_dirs("llama"), {"method": "gptq", "bits": 4, "group_size": 32})
    size = ModelSize.of(qm.model, qm.source.definition.layers_path)
    summary = qm.quantize(samples=96, length=16)  # no calibration given: the default mixture
    source = summary.calibration_source
    budget = plan_generation(96, 192, 16, size, 0.10)
    assert 0 < budget.granted < 96  # the tiny model's budget grants some rows, not all
    # every documentation block a documentation-only run would use, the generated rows the budget grants and
    # documentation blocks for the rest: the row count stays
    assert source["self_generated_rows"] == budget.granted and source["samples"] == 192
    assert source["documentation_rows"] == 192 - budget.granted
    assert source["generation_budget"] == {**budget.as_meta()} and source["generation_budget"]["reason"]
    assert source["cache"] == "miss"
    assert summary.calibration is not None
    assert summary.calibration.rows == 192 and summary.calibration.tokens == 192 * 16
    assert source["generation_seconds"] >= 0 and summary.calibration_seconds >= source["generation_seconds"]
    qm.save(tmp_path / "q")
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    recorded = config["quantization_config"]["meta"]["calibration"]
    assert recorded == {k: v for k, v in source.items() if k not in ("generation_seconds", "cache")}
    assert json.loads((tmp_path / "q" / "quantize_config.json").read_text())["meta"]["calibration"] == recorded
    report = json.loads((tmp_path / "q" / "quant_report.json").read_text())
    assert report["summary"]["calibration_source"]["generation_seconds"] == source["generation_seconds"]
    assert report["summary"]["calibration_source"]["cache"] == "miss"
    reloaded = qhf.load_quantized(tmp_path / "q")  # the extra meta does not disturb reading the config back
    assert reloaded.config.bits == 4 and "calibration" not in reloaded.config.settings

    again = qhf.load(tiny_dirs("llama"), {"method": "gptq", "bits": 4, "group_size": 32})
    second = again.quantize(samples=96, length=16).calibration_source
    assert second["cache"] == "hit" and second["tokens_sha256"] == source["tokens_sha256"]
    assert second["generation_seconds"] == 0.0


def test_quantize_takes_a_configured_mixture_and_it_is_reproducible(tiny_dirs) -> None:
    from qhf.calibration import default_calibration

    mix = DefaultCalibration(documentation_rows=2, self_generated_rows=3, length=24, seed=7, batch_size=2)
    qm = qhf.load(tiny_dirs("llama"), {"method": "gptq", "bits": 4, "group_size": 32})
    source = qm.quantize(calibration=mix)["calibration_source"]
    assert source["self_generated_rows"] == 3 and source["documentation_rows"] == 2 and source["length"] == 24
    assert source["seed"] == 7
    fresh = qhf.load(tiny_dirs("llama"), {"method": "gptq"})
    again = default_calibration(fresh.source, fresh.tokenizer, mix)
    assert again.meta["tokens_sha256"] == source["tokens_sha256"]  # same seed -> same calibration tokens


def test_layers_loaded_for_generation_go_back_to_meta(tiny_dirs) -> None:
    from qhf.calibration import default_calibration

    qm = qhf.load(tiny_dirs("llama"), {"method": "gptq"})
    layers = qm.model.get_submodule("model.layers")
    assert all(p.device.type == "meta" for p in layers.parameters())
    mixed = default_calibration(
        qm.source, qm.tokenizer, DefaultCalibration(documentation_rows=0, self_generated_rows=2, length=16)
    )
    assert len(mixed.rows) == 2
    assert all(p.device.type == "meta" for p in layers.parameters())  # the layer loop reads them one at a time


def test_user_calibration_records_no_mixture(tmp_path, tiny_dirs) -> None:
    qm = qhf.load(tiny_dirs("llama"), {"method": "gptq", "bits": 4, "group_size": 32})
    qm.quantize(calibration=["some text " * 20, "more text " * 30])
    qm.save(tmp_path / "q", verify=False)
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    assert "calibration" not in config["quantization_config"]["meta"]
