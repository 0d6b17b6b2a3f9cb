"""qhf's method registry (:mod:`qhf.methods`): closed settings, the built-in methods and entry-point discovery."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from qformats.config.quantizer_formats import DEFAULT_FORMATS, QUANTIZER_FORMATS, WEIGHT_ONLY_METHODS
from qhf.methods import (
    MethodError,
    MethodSettingsError,
    QuantMethod,
    cli_method,
    cli_names,
    closed_settings,
    discover_methods,
    find_method,
    get_method,
    method_names,
    register_method,
    unregister_method,
)
from qhf.methods.builtin_settings import CalibratedSettings, WeightOnlySettings


@dataclass(frozen=True)
class Knobs:
    steps: int = 4
    ratio: float = 0.5
    name: str = "x"
    on: bool = False


def test_closed_settings_refuse_an_unknown_key_naming_it_and_the_accepted_ones() -> None:
    with pytest.raises(
        MethodSettingsError, match=r"^stepz: not a setting of method 'm' \(it accepts: steps, ratio, name, on\)$"
    ):
        closed_settings(Knobs, {"stepz": 3}, method="m")
    with pytest.raises(MethodSettingsError, match=r"a: not a setting .*; also unknown: b$"):
        closed_settings(Knobs, {"a": 1, "b": 2, "steps": 1}, method="m")


def test_closed_settings_check_types_and_take_defaults() -> None:
    assert closed_settings(Knobs, {}, method="m") == Knobs()
    assert closed_settings(Knobs, {"ratio": 1, "steps": 2}, method="m") == Knobs(steps=2, ratio=1.0)
    assert isinstance(closed_settings(Knobs, {"ratio": 1}, method="m").ratio, float)
    for key, value, kind in (("steps", True, "integer"), ("steps", 1.5, "int"), ("on", 1, "bool"), ("name", 3, "str")):
        with pytest.raises(MethodSettingsError, match=rf"^{key}: method 'm' expects an? {kind}"):
            closed_settings(Knobs, {key: value}, method="m")


def test_built_in_methods_are_qformats_table() -> None:
    assert method_names()[: len(QUANTIZER_FORMATS)] == tuple(QUANTIZER_FORMATS)
    for name, formats in QUANTIZER_FORMATS.items():
        method = get_method(name)
        assert method.builtin and method.formats == formats and method.default_format == DEFAULT_FORMATS.get(name)
        assert method.weight_only == (name in WEIGHT_ONLY_METHODS)
    assert (
        cli_method("nf4") is get_method("bitsandbytes") and "nf4" in cli_names() and "bitsandbytes" not in cli_names()
    )


def test_defaults_tables_are_the_settings_classes() -> None:
    from qhf.calibrated_settings import DEFAULTS as CALIBRATED
    from qhf.weight_only_settings import DEFAULTS as WEIGHT_ONLY

    assert dict(CALIBRATED) == CalibratedSettings().__dict__
    assert WEIGHT_ONLY == WeightOnlySettings().__dict__


def test_typed_view_of_a_resolved_config() -> None:
    from qhf.quant_config import read_quantize_config

    cfg = read_quantize_config({"method": "gptq", "bits": 4, "group_size": 128, "damp_percent": 0.1})
    own = get_method("gptq").settings(cfg)
    assert isinstance(own, CalibratedSettings) and own.damp_percent == 0.1 and own.act_group_aware is True


class Extra(QuantMethod):
    name = "extra_test_method"


def test_register_refuses_a_taken_name_and_a_built_in_cannot_go() -> None:
    with pytest.raises(MethodError, match=r"'gptq' is already registered"):
        register_method(type("G", (QuantMethod,), {"name": "gptq"})())
    with pytest.raises(MethodError, match=r"'rtn' is built in"):
        unregister_method("rtn")
    register_method(Extra())
    try:
        assert find_method("extra_test_method") is not None
        with pytest.raises(MethodError, match=r"'extra_test_method' is already registered"):
            register_method(Extra())
    finally:
        unregister_method("extra_test_method")
    with pytest.raises(MethodError, match=r"^method: expected one of gptq, awq, .* found 'extra_test_method'$"):
        get_method("extra_test_method")


def _entry_point(site: Path, line: str) -> Path:
    info = site / "broken_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[lowbit.methods]\n{line}\n", encoding="utf-8")
    return site


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("nope = no_such_module_here:Method", r"entry point 'nope' = 'no_such_module_here:Method' \(lowbit\.methods, "
         r"distribution 'broken-plugin'\): cannot be loaded: ModuleNotFoundError"),
        ("named = qhf.methods.method:NoSettings", r"entry point .named. .*: expected a QuantMethod subclass"),
        ("other = test_methods_registry:Extra", r"entry point 'other' .*: the method's name is 'extra_test_method'"),
        ("gptq = test_methods_registry:Extra", r"entry point 'gptq' \(lowbit\.methods\): 'gptq' is a built-in method"),
    ],
)  # fmt: skip
def test_a_bad_entry_point_is_refused_naming_it(tmp_path: Path, line: str, expected: str) -> None:
    site = str(_entry_point(tmp_path, line))
    sys.path.insert(0, site)
    try:
        with pytest.raises(MethodError, match=expected):
            discover_methods()
    finally:
        sys.path.remove(site)
        discover_methods()  # the environment as it was
