"""Every family of architecture_coverage.FAMILIES quantizes end to end (GPTQ, and AWQ where a group has a
previous op) and reloads to the same logits; the refusals CI checks raise the named error first; and every
model type of transformers' MODEL_FOR_CAUSAL_LM_MAPPING is classified (covered, or refused with a reason), so
a transformers release that adds a type fails here until it is run and classified (the full run of every
type is ``python tests-integration/architecture_coverage.py``, see docs/architectures.md)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from architecture_coverage import AUTO_COVERED, CI_REFUSED, FAMILIES, REFUSED, STAGES, build, mapping_types, run_family

MOE_FAMILIES = {
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "olmoe",
    "phimoe",
    "deepseek_v2",
    "deepseek_v3",
    "flex_olmo",
    "ernie4_5_moe",
    "glm4_moe",
    "gpt_oss",
    "granitemoe",
    "llama4_text",
    "qwen3_next",
    "sarvam_moe",
    "jamba",
    "nemotron_h",
}


@pytest.fixture(scope="module")
def tokenizer():
    from tiny_models import build_tokenizer

    return build_tokenizer()


def test_the_suite_is_wide_enough() -> None:
    assert len(FAMILIES) >= 40
    assert len(MOE_FAMILIES & set(FAMILIES)) >= 14


def test_every_mapping_type_is_classified_once() -> None:
    mapping = set(mapping_types())
    lists = {"FAMILIES": set(FAMILIES), "AUTO_COVERED": set(AUTO_COVERED), "REFUSED": set(REFUSED)}
    unclassified = sorted(mapping - set().union(*lists.values()))
    assert not unclassified, f"model types of transformers' causal-LM mapping in no list: {unclassified}"
    stale = {name: sorted(found - mapping) for name, found in lists.items() if found - mapping}
    assert not stale, f"listed types transformers' mapping lacks: {stale}"
    names = list(lists)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            assert not lists[first] & lists[second], f"in both {first} and {second}: {lists[first] & lists[second]}"


def test_every_refusal_names_its_stage_and_reason() -> None:
    for family, refusal in REFUSED.items():
        assert refusal.stage in STAGES, family
        assert refusal.match.strip() and refusal.describe().strip(), family
        if refusal.stage == "qhf":  # a named refusal carries the words for the doc, not only the error
            assert refusal.reason, family


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_quantizes_saves_and_reloads(family: str, tokenizer) -> None:
    outcome = run_family(family, tokenizer)
    assert outcome.status["gptq"] == "pass"
    assert outcome.status["awq"] in ("pass", "no previous op")
    assert outcome.experts == (family in MOE_FAMILIES)


@pytest.mark.parametrize("family", CI_REFUSED)
def test_refused_family_raises_the_named_error_before_work(family: str, tokenizer, tmp_path) -> None:
    import qhf

    assert REFUSED[family].stage == "qhf"
    src = build(tmp_path / "src", family, tokenizer)
    with pytest.raises(qhf.QHFError, match=re.escape(REFUSED[family].match)):
        qhf.load(src, {"method": "gptq", "bits": 4, "group_size": 32})
