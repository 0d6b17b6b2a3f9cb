"""Dynamic per-module rules: negatives first, start-anchored regex, first match wins, order kept."""

from __future__ import annotations

import json

import pytest
from qformats.config import DynamicRules, QuantizeConfig, parse_config
from qformats.errors import ConfigError

RULES = {
    r"+:model\.layers\.[0-3]\.": {"bits": 8, "group_size": 32},
    r"model\.layers\.1\.mlp": {"bits": 2},
    r"-:.*\.mlp\.gate": {},
    r"model\.layers\.\d+\.self_attn\.v_proj$": {"sym": False},
}


def test_negative_rules_are_tried_before_positive_ones() -> None:
    rules = DynamicRules.from_mapping(RULES)
    assert rules.excluded("model.layers.0.mlp.gate_proj")  # positive rule listed first, negative wins
    assert rules.override("model.layers.0.mlp.gate_proj") == {}


def test_first_positive_match_wins_in_file_order() -> None:
    rules = DynamicRules.from_mapping(RULES)
    assert rules.override("model.layers.1.mlp.up_proj") == {"bits": 8, "group_size": 32}
    assert rules.override("model.layers.7.self_attn.v_proj") == {"sym": False}
    assert rules.match("model.layers.7.self_attn.q_proj") is None


def test_match_is_start_anchored_over_the_full_name() -> None:
    rules = DynamicRules.from_mapping({r"layers\.0\.": {"bits": 8}})
    assert rules.match("model.layers.0.q_proj") is None  # not a search: must match from the start
    assert rules.match("layers.0.q_proj") is not None
    exact = DynamicRules.from_mapping({r"^model\.layers\.0\.q_proj$": {"bits": 8}})
    assert exact.match("model.layers.0.q_proj") is not None
    assert exact.match("model.layers.0.q_proj_extra") is None


def test_for_module_applies_overrides() -> None:
    cfg = QuantizeConfig(bits=4, group_size=128, dynamic=RULES)
    spec = cfg.for_module("model.layers.2.self_attn.k_proj")
    assert spec is not None and (spec.bits, spec.group_size, spec.sym) == (8, 32, True)
    assert cfg.for_module("model.layers.9.mlp.gate_proj") is None
    base = cfg.for_module("model.layers.9.mlp.down_proj")
    assert base is not None and (base.bits, base.group_size) == (4, 128)


def test_order_preserved_on_write_and_round_trip() -> None:
    cfg = QuantizeConfig(bits=4, dynamic=RULES)
    text = json.dumps(cfg.to_dict())
    assert list(json.loads(text)["dynamic"]) == list(RULES)
    again = parse_config(json.loads(text))
    assert again.dynamic is not None and again.dynamic.to_mapping() == RULES
    assert again == cfg


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"(unclosed": {}}, "invalid regular expression"),
        ({"x": {"bits": "8"}}, r"bits: expected an integer"),
        ({"x": {"bits": 12}}, "bits: expected 1..8"),
        ({"x": {"group_size": 0}}, "group_size"),
        ({"x": {"sym": 1}}, "sym: expected true or false"),
        ({"x": [1]}, "override object"),
        ([["x", {}]], "pattern -> override"),
    ],
)
def test_malformed_rules_named(rules: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        DynamicRules.from_mapping(rules)
