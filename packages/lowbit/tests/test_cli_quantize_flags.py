"""``lowbit quantize`` flags -> the config dict qhf reads into its ``QuantizeConfig`` (no model needed), presets
included."""

from __future__ import annotations

import pytest
from lowbit.cli.parser import build_parser
from lowbit.cli.quantize_flags import quant_config
from lowbit.errors import UsageError
from qhf.config_view import setting
from qhf.quant_config import read_quantize_config


def _config(*flags: str) -> dict[str, object]:
    return quant_config(build_parser().parse_args(["quantize", "model.gguf", "--out", "out", *flags]))


def test_defaults_leave_the_reference_defaults_to_qhf() -> None:
    config = _config()
    assert config == {"method": "gptq", "bits": 4, "group_size": 128, "sym": True}
    read = read_quantize_config(config)
    assert setting(read, "act_group_aware") is True and read.desc_act is False and setting(read, "damp_percent") == 0.05


def test_gptq_flags_reach_the_settings() -> None:
    read = read_quantize_config(
        _config("--static-groups", "--mse", "2.4", "--no-act-group-aware", "--damp-percent", "0.02")
    )
    names = ("static_groups", "mse", "act_group_aware", "damp_percent")
    assert tuple(setting(read, name) for name in names) == (True, 2.4, False, 0.02)


def test_best_preset_and_explicit_flags_override_it() -> None:
    best = read_quantize_config(_config("--preset", "best"))
    found = (setting(best, "act_group_aware"), setting(best, "mse"), setting(best, "damp_percent"))
    assert (best.desc_act, *found) == (True, False, 2.0, 0.05)
    assert setting(best, "rotation")["kind"] == "hadamard"
    unrotated = read_quantize_config(_config("--preset", "best", "--rotation", "none"))
    assert setting(unrotated, "rotation")["kind"] == "none"
    tuned = read_quantize_config(_config("--preset", "best", "--damp-percent", "0.02", "--group-size", "64", "--asym"))
    assert (tuned.desc_act, setting(tuned, "damp_percent"), tuned.group_size, tuned.sym) == (True, 0.02, 64, False)
    assert read_quantize_config(_config("--preset", "reference")) == read_quantize_config(_config())


def test_best_preset_at_two_bits_is_asymmetric_in_gptq_v2_and_flags_still_win() -> None:
    two = read_quantize_config(_config("--preset", "best", "--bits", "2", "--group-size", "32"))
    found = (two.bits, two.group_size, two.sym, two.format, two.desc_act, setting(two, "mse"))
    assert found == (2, 32, False, "gptq_v2", True, 2.0)
    assert setting(two, "rotation")["kind"] == "hadamard"
    mine = read_quantize_config(_config("--preset", "best", "--bits", "2", "--format", "gptq", "--mse", "0"))
    assert (mine.sym, mine.format, setting(mine, "mse")) == (False, "gptq", 0.0)
    three = read_quantize_config(_config("--preset", "best", "--bits", "3"))
    assert (three.sym, three.format, three.desc_act, setting(three, "mse")) == (True, "gptq", True, 2.0)


def test_preset_with_another_method_is_refused_naming_both_flags() -> None:
    with pytest.raises(UsageError, match=r"--preset best.*--method awq"):
        _config("--preset", "best", "--method", "awq")


def test_ray_flags_parse_and_rtn_with_ray_is_refused_before_loading(tmp_path) -> None:
    from lowbit.cli.quantize_cmd import _check_args

    source = tmp_path / "model.gguf"
    source.write_bytes(b"")
    args = build_parser().parse_args(["quantize", str(source), "--out", str(tmp_path / "o"), "--ray", "local"])
    assert (args.ray, args.ray_workers) == ("local", 2)
    rtn = build_parser().parse_args(
        ["quantize", str(source), "--out", str(tmp_path / "o"), "--method", "rtn", "--ray", "auto"]
    )
    with pytest.raises(UsageError, match=r"--ray: rtn runs no calibration forwards"):
        _check_args(rtn)


def test_ray_without_the_ray_package_names_the_extra(monkeypatch) -> None:
    import sys

    from lowbit.cli.quantize_cmd import _executor

    monkeypatch.setitem(sys.modules, "ray", None)  # what an install without the extra sees
    args = build_parser().parse_args(["quantize", "m.gguf", "--out", "o", "--ray", "local", "--ray-workers", "3"])
    with pytest.raises(UsageError, match=r"--ray local: the Ray executor needs the ray package: pip install"):
        _executor(args)


def test_rotation_flags_reach_the_rotation_setting() -> None:
    assert "rotation" not in _config()
    read = read_quantize_config(_config("--rotation", "hadamard"))
    assert setting(read, "rotation") == {"kind": "hadamard", "seed": 0, "residual": "auto", "heads": "auto"}
    assert (
        setting(read_quantize_config(_config("--rotation", "random", "--rotation-seed", "7")), "rotation")["seed"] == 7
    )
    assert read_quantize_config(_config("--rotation", "none")) == read_quantize_config(_config())
    with pytest.raises(UsageError, match=r"--rotation-seed: only together with --rotation"):
        _config("--rotation-seed", "3")
    with pytest.raises(UsageError, match=r"--rotation"):
        _config("--method", "fp8", "--rotation", "hadamard")


def test_best_for_a_target_that_loads_lora_adds_eora_and_without_one_does_not() -> None:
    plain = _config("--preset", "best")
    assert "adapter" not in plain
    for target in ("vllm", "vllm:gptq", "transformers+gptqmodel"):
        with_lora = _config("--preset", "best", "--target", target)
        assert with_lora == {**plain, "adapter": {"rank": 32}}
        assert read_quantize_config(with_lora).settings["adapter"] == {"name": "lora", "path": "eora", "rank": 32}
    assert _config("--preset", "best", "--target", "llama.cpp") == plain
    two = _config("--preset", "best", "--bits", "2", "--group-size", "32", "--target", "vllm")
    assert (two["adapter"], two["sym"], two["format"]) == ({"rank": 32}, False, "gptq_v2")
    assert _config("--preset", "reference", "--target", "vllm") == _config("--preset", "reference")


def test_eora_rank_flags_win_over_what_best_adds_for_the_target() -> None:
    assert _config("--preset", "best", "--target", "vllm", "--eora-rank", "8")["adapter"] == {"rank": 8}
    off = _config("--preset", "best", "--target", "vllm", "--eora-rank", "0")
    assert off["adapter"] is None and read_quantize_config(off).settings["adapter"] is None
    refused = r"--awq-scales: --preset best --target vllm adds an EoRA adapter.*--eora-rank 0"
    with pytest.raises(UsageError, match=refused):
        _config("--preset", "best", "--target", "vllm", "--awq-scales")
    assert _config("--preset", "best", "--target", "vllm", "--awq-scales", "--eora-rank", "0")["awq_scales"] is True
