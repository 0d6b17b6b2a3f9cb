"""Dynamic rule patterns that could backtrack catastrophically are refused by name, before any match."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from checkpoint_fixtures import GPTQ_CONFIG, build
from qformats.config.dynamic import DynamicRules
from qformats.config.pattern_guard import MAX_PATTERN_LENGTH
from qformats.errors import ConfigError
from qformats.inspect import main


@pytest.mark.parametrize(
    "pattern",
    [
        r".*\.layers\.(\d+)\.mlp\..*",
        r"-:model\.layers\.1\.",
        r"+:.*(?:q|k|v)_proj",
        r"^(?!.*lm_head).*",
        r"model\.layers\.([0-9]|1[0-5])\.",
        r"-:.*\.(gate|up)_proj$",
    ],
)
def test_ordinary_rule_patterns_compile(pattern: str) -> None:
    assert len(DynamicRules.from_mapping({pattern: {}})) == 1


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a+)+$", "nested quantifier"),
        (r"(a|ab)*c", "nested quantifier"),
        (r"-:(.*\.)*x", "nested quantifier"),
        (r"(\w+)\.\1", "backreference"),
        (".*" * 5 + "x", "5 unbounded repeats"),
        ("a" * (MAX_PATTERN_LENGTH + 1), f"expected at most {MAX_PATTERN_LENGTH}"),
    ],
)
def test_risky_patterns_are_refused_by_name(pattern: str, reason: str) -> None:
    with pytest.raises(ConfigError, match=rf"dynamic\[.*{reason}"):
        DynamicRules.from_mapping({pattern: {}})


def test_inspect_refuses_a_catastrophic_pattern_instead_of_hanging(tmp_path: Path, capsys) -> None:
    build(tmp_path / "c", "gptq", sym=True, layers=1)
    bad = dict(GPTQ_CONFIG, dynamic={"-:(m+)+$": {}})
    (tmp_path / "c" / "quantize_config.json").write_text(json.dumps(bad))
    assert main([str(tmp_path / "c")]) == 2
    err = capsys.readouterr().err
    assert "quantize_config.json" in err and "nested quantifier" in err and len(err.strip().splitlines()) == 1
