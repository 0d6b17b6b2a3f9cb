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
        r"model\.layers\.(?:1){2}\.",
        r".*\.(?:ab){2,5}\..*",
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
        (r"(?:.{1,40}){1,40}X$", "nested quantifier"),
        (r"-:(?:a{1,2}b?){3}", "nested quantifier"),
        (r".{1,9}.{1,9}.{1,9}.{1,9}X", "4 unbounded repeats"),
        (r"(ab|cd)(ab|cd)(ab|cd)(ab|cd)(ab|cd)X", "32 combined choices"),
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


def test_a_module_name_longer_than_the_bound_is_refused_by_name() -> None:
    from qformats.config.pattern_guard import MAX_NAME_LENGTH

    rules = DynamicRules.from_mapping({r".*a.*a.*aX": {}})
    assert rules.match("a" * MAX_NAME_LENGTH) is None  # within the bound: matched (and quickly)
    with pytest.raises(ConfigError, match=rf"characters; expected at most {MAX_NAME_LENGTH}"):
        rules.match("a" * (MAX_NAME_LENGTH + 1))


def test_inspect_refuses_nested_bounded_repeats_instead_of_hanging(tmp_path: Path, capsys) -> None:
    build(tmp_path / "c", "gptq", sym=True, layers=1)
    bad = dict(GPTQ_CONFIG, dynamic={"-:(?:.{1,40}){1,40}X$": {}})
    (tmp_path / "c" / "quantize_config.json").write_text(json.dumps(bad))
    assert main([str(tmp_path / "c")]) == 2
    assert "nested quantifier" in capsys.readouterr().err
