"""Every family of architecture_coverage.FAMILIES quantizes end to end (GPTQ, and AWQ where a group has a
previous op) and reloads to the same logits; the expected-unsupported ones raise the named error first."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from architecture_coverage import EXPECTED_UNSUPPORTED, FAMILIES, build, run_family

SUPPORTED = [f for f in FAMILIES if f not in EXPECTED_UNSUPPORTED]
MOE_FAMILIES = {"mixtral", "qwen2_moe", "qwen3_moe", "olmoe", "phimoe", "deepseek_v2", "deepseek_v3"}


@pytest.fixture(scope="module")
def tokenizer():
    from tiny_models import build_tokenizer

    return build_tokenizer()


def test_the_suite_is_wide_enough() -> None:
    assert len(SUPPORTED) >= 30
    assert len(MOE_FAMILIES & set(SUPPORTED)) >= 5


@pytest.mark.parametrize("family", SUPPORTED)
def test_family_quantizes_saves_and_reloads(family: str, tokenizer) -> None:
    outcome = run_family(family, tokenizer)
    assert outcome.status["gptq"] == "pass"
    assert outcome.status["awq"] in ("pass", "no previous op")
    assert outcome.experts == (family in MOE_FAMILIES or family in {"flex_olmo", "ernie4_5_moe", "glm4_moe", "gpt_oss"})


@pytest.mark.parametrize("family", sorted(EXPECTED_UNSUPPORTED))
def test_unsupported_family_raises_the_named_error_before_work(family: str, tokenizer, tmp_path) -> None:
    import qhf

    src = build(tmp_path / "src", family, tokenizer)
    with pytest.raises(qhf.QHFError, match=EXPECTED_UNSUPPORTED[family]):
        qhf.load(src, {"method": "gptq", "bits": 4, "group_size": 32})
