"""Self-generated calibration on a tiny random llama: seeded determinism, openers, specials, validation."""

from __future__ import annotations

import pytest
import torch
from qhf.calibration import GenerationSettings, generate_samples, self_generated
from qhf.calibration.self_generated import nucleus_draw
from qhf.errors import CalibrationError
from tiny_models import VOCAB, tiny_config


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(tiny_config("llama"), dtype=torch.float32).eval()


def _settings(**kw) -> GenerationSettings:
    base = dict(count=5, length=12, batch_size=2, seed=3, prompts=("", "The", "def f():"))
    base.update(kw)
    return GenerationSettings(**base)


def test_same_seed_same_tokens_other_seed_other_tokens(model, tokenizer) -> None:
    first = generate_samples(model, tokenizer, _settings())
    again = generate_samples(model, tokenizer, _settings())
    other = generate_samples(model, tokenizer, _settings(seed=4))
    assert first.rows == again.rows
    assert first.rows != other.rows
    assert len(first.rows) == 5 and all(len(r) == 12 for r in first.rows)


def test_rows_start_with_bos_and_their_opener_and_draw_no_special_tokens(model, tokenizer) -> None:
    out = generate_samples(model, tokenizer, _settings())
    prompts = ("", "The", "def f():")
    specials = set(tokenizer.all_special_ids)
    for i, row in enumerate(out.rows):
        opener = [tokenizer.bos_token_id] + tokenizer(prompts[i % 3], add_special_tokens=False)["input_ids"]
        assert list(row[: len(opener)]) == opener
        assert not specials & set(row[len(opener) :])
        assert all(0 <= t < VOCAB for t in row)
    drawn = sum(12 - 1 - len(tokenizer(prompts[i % 3], add_special_tokens=False)["input_ids"]) for i in range(5))
    assert out.drawn_tokens == drawn


def test_row_depends_on_seed_and_index_not_on_neighbours(model, tokenizer) -> None:
    # Row i draws from its own generator: the first rows of a larger run equal a smaller run's rows.
    small = generate_samples(model, tokenizer, _settings(count=2))
    large = generate_samples(model, tokenizer, _settings(count=5))
    assert large.rows[:2] == small.rows


def test_low_temperature_concentrates_and_progress_is_reported(model, tokenizer) -> None:
    seen: list[tuple[int, int]] = []
    cold = generate_samples(
        model,
        tokenizer,
        _settings(temperature=1e-4, prompts=("",), count=3, batch_size=3),
        on_progress=lambda done, total, _s: seen.append((done, total)),
    )
    assert cold.rows[0] == cold.rows[1] == cold.rows[2]  # near-greedy: the seed no longer matters
    assert seen == [(3, 3)]


def _draw_counts(probs: torch.Tensor, top_p: float, n: int = 4000) -> torch.Tensor:
    """How often each token is drawn from every row of ``probs`` at ``n`` evenly spaced uniforms."""
    uniforms = (torch.arange(n, dtype=torch.float64) + 0.5) / n
    rows = probs.repeat_interleave(n, dim=0)
    drawn = nucleus_draw(rows, top_p, uniforms.repeat(probs.shape[0]))
    return torch.stack([torch.bincount(d, minlength=probs.shape[1]) for d in drawn.view(probs.shape[0], n)])


def test_nucleus_keeps_the_smallest_set_reaching_top_p_and_draws_in_proportion() -> None:
    probs = torch.tensor([[0.3, 0.05, 0.5, 0.15]], dtype=torch.float64)
    assert _draw_counts(probs, 0.7).tolist() == [[1500, 0, 2500, 0]]  # {0.5, 0.3} renormalized: 5/8, 3/8
    assert _draw_counts(probs, 0.5).tolist() == [[0, 0, 4000, 0]]
    assert _draw_counts(probs, 1.0).tolist() == [[1200, 200, 2000, 600]]
    zero = torch.tensor([[0.0, 0.6, 0.4]], dtype=torch.float64)
    assert _draw_counts(zero, 1.0)[0, 0] == 0  # probability 0 (a banned token) is never drawn


def test_nucleus_larger_than_the_first_candidates_looks_further(monkeypatch) -> None:
    # Row 0 is flat (its nucleus needs 95 of 100 tokens), row 1 is peaked: only row 0 must look further.
    monkeypatch.setattr(self_generated, "FIRST_CANDIDATES", 4)
    flat = torch.full((100,), 0.01, dtype=torch.float64)
    peaked = torch.zeros(100, dtype=torch.float64)
    peaked[7], peaked[3] = 0.9, 0.1
    counts = _draw_counts(torch.stack([flat, peaked]), 0.95, n=9500)
    assert int((counts[0] > 0).sum()) == 95 and int(counts[0].max()) == 100
    assert counts[1].tolist()[7] == 8550 and counts[1].tolist()[3] == 950


@pytest.mark.parametrize(
    ("field", "value"),
    [("count", -1), ("length", 1), ("temperature", 0.0), ("top_p", 0.0), ("top_p", 1.5), ("batch_size", 0)],
)
def test_bad_settings_name_the_field(model, tokenizer, field: str, value: object) -> None:
    with pytest.raises(CalibrationError, match=field):
        generate_samples(model, tokenizer, _settings(**{field: value}))


def test_meta_device_model_is_refused(tokenizer) -> None:
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        meta = AutoModelForCausalLM.from_config(tiny_config("llama"))
    with pytest.raises(CalibrationError, match="meta"):
        generate_samples(meta, tokenizer, _settings())


def test_progress_lines_give_a_first_estimate_and_one_line_per_batch(model, tokenizer, capsys) -> None:
    generate_samples(model, tokenizer, _settings(count=4, batch_size=2), progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("calibration: first step took") and "estimate" in lines[0]
    batches = [line for line in lines if line.startswith("calibration: generating: ")]
    assert [b.split(", step")[0] for b in batches] == [
        "calibration: generating: 2/4 rows",
        "calibration: generating: 4/4 rows",
    ]
    assert all("elapsed" in b and "eta" in b for b in batches) and "\r" not in "".join(lines)
