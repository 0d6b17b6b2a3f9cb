"""Each ``lowbit quantize`` method flag maps its own value to config fields (``MethodFlag.config`` / ``rewrite``):
the CLI keeps no flag -> field table (issue 37)."""

from __future__ import annotations

import pytest
from qhf.methods import get_method, method_flag
from qhf.methods.cli_flags import FlagCombinationError, method_config, rewritten


def _config(method: str, **values: object) -> dict[str, object]:
    return method_config(method, get_method(method).cli_flags, values)


def test_gptqs_flags_give_their_fields_and_the_integer_defaults() -> None:
    assert _config("gptq") == {"group_size": 128, "sym": True}
    got = _config("gptq", group_size=32, asym=True, desc_act=True, no_act_group_aware=True, gptaq=0.3, eora_rank=4)
    assert got == {
        "group_size": 32, "sym": False, "desc_act": True, "act_group_aware": False,
        "gptaq": {"alpha": 0.3}, "adapter": {"rank": 4},
    }  # fmt: skip
    assert _config("gptq", rotation="hadamard")["rotation"] == {"kind": "hadamard", "seed": 0}
    assert _config("gptq", bits_budget=4.5, bits_candidates=(4, 8))["bits_candidates"] == [4, 8]


def test_fp8s_flags_give_its_scale_fields() -> None:
    assert _config("fp8", fp8_scale="block", fp8_block=[32, 32]) == {
        "weight_scale_method": "block",
        "weight_block_size": [32, 32],
    }


@pytest.mark.parametrize(
    ("method", "values", "message"),
    [
        ("gptq", {"foem_alpha": 0.1}, "--foem-alpha: only together with --foem"),
        ("gptq", {"gptaq": 0.2, "foem": 0.2}, "--gptaq, --foem: choose one"),
        (
            "gptq",
            {"awq_scales": True, "eora_rank": 2},
            "--awq-scales: a GPTQ variant of its own; not with --method gptq --eora-rank",
        ),
        ("gptq", {"rotation_seed": 1}, "--rotation-seed: only together with --rotation"),
        ("gptq", {"bits_candidates": [4]}, "--bits-candidates: only together with --bits-budget"),
        ("fp8", {"fp8_block": [32]}, "--fp8-block: expected ROWS,COLS"),
    ],
)
def test_flags_that_do_not_fit_together_are_refused_naming_them(method: str, values: dict, message: str) -> None:
    with pytest.raises(FlagCombinationError, match=message):
        _config(method, **values)


def test_a_preset_rewrites_the_config_under_the_flags_given() -> None:
    flags = get_method("gptq").cli_flags
    config = rewritten(flags, {"preset": "best"}, {"method": "gptq", "group_size": 32})
    assert config["group_size"] == 32 and config["desc_act"] is True and config["rotation"] == "hadamard"


def test_a_flag_without_config_sets_the_setting_of_its_name() -> None:
    own = method_flag("--clip-grid", "a plugin's own flag", type=int, default=None)
    assert method_config("rtn_clip", (own,), {"clip_grid": 6}) == {"clip_grid": 6}
    assert method_config("rtn_clip", (own,), {}) == {}
