"""``lowbit quantize`` flags -> the qhf settings dict (no model needed), presets included."""

from __future__ import annotations

import pytest
from lowbit.cli.parser import build_parser
from lowbit.cli.quantize_cmd import quant_config
from lowbit.errors import UsageError
from qhf.quant_config import parse_settings


def _config(*flags: str) -> dict[str, object]:
    return quant_config(build_parser().parse_args(["quantize", "model.gguf", "--out", "out", *flags]))


def test_defaults_leave_the_reference_defaults_to_qhf() -> None:
    config = _config()
    assert config == {"method": "gptq", "bits": 4, "group_size": 128, "sym": True}
    settings = parse_settings(config)
    assert settings.act_group_aware is True and settings.desc_act is False and settings.damp_percent == 0.05


def test_gptq_flags_reach_the_settings() -> None:
    settings = parse_settings(
        _config("--static-groups", "--mse", "2.4", "--no-act-group-aware", "--damp-percent", "0.02")
    )
    assert (settings.static_groups, settings.mse, settings.act_group_aware, settings.damp_percent) == (
        True,
        2.4,
        False,
        0.02,
    )


def test_best_preset_and_explicit_flags_override_it() -> None:
    best = parse_settings(_config("--preset", "best"))
    assert (best.desc_act, best.act_group_aware, best.mse, best.damp_percent) == (True, False, 2.0, 0.05)
    tuned = parse_settings(_config("--preset", "best", "--damp-percent", "0.02", "--group-size", "64", "--asym"))
    assert (tuned.desc_act, tuned.damp_percent, tuned.group_size, tuned.sym) == (True, 0.02, 64, False)
    assert parse_settings(_config("--preset", "reference")) == parse_settings(_config())


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
