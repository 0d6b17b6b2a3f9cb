"""CheckpointConfig validation names the bad field; the fault-hook environment syntax is validated too."""

from __future__ import annotations

from pathlib import Path

import pytest
from qcheckpoint import CheckpointConfig, CheckpointConfigError, CheckpointStore, FaultHook
from qcheckpoint.faults import NO_FAULTS, POINTS


def test_defaults_and_accessors(tmp_path: Path) -> None:
    config = CheckpointConfig()
    assert (config.path, config.resume, config.interval, config.keep_last, config.strict_device_check) == (
        "auto",
        "auto",
        "layer:1",
        2,
        True,
    )
    assert config.interval_layers == 1 and config.is_auto_path
    assert config.resolve_root(tmp_path) == tmp_path
    assert CheckpointConfig(interval="  layer:12 ").interval_layers == 12
    explicit = CheckpointConfig(path=tmp_path / "c", resume="never", keep_last=5, strict_device_check=False)
    assert explicit.resolve_root("/ignored") == tmp_path / "c" and not explicit.is_auto_path
    with pytest.raises(AttributeError):
        explicit.keep_last = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"path": ""}, "path"),
        ({"path": "   "}, "path"),
        ({"path": 3}, "path"),
        ({"resume": "sometimes"}, "resume"),
        ({"resume": None}, "resume"),
        ({"interval": "layer:0"}, "interval"),
        ({"interval": "layers:2"}, "interval"),
        ({"interval": "layer:-1"}, "interval"),
        ({"interval": "layer:1x"}, "interval"),
        ({"interval": 1}, "interval"),
        ({"keep_last": 1}, "keep_last"),
        ({"keep_last": True}, "keep_last"),
        ({"keep_last": 2.0}, "keep_last"),
        ({"strict_device_check": 1}, "strict_device_check"),
    ],
)
def test_bad_fields_are_named(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(CheckpointConfigError, match=f"CheckpointConfig.{field}"):
        CheckpointConfig(**kwargs)  # type: ignore[arg-type]


def test_auto_path_needs_a_default() -> None:
    with pytest.raises(CheckpointConfigError, match="auto"):
        CheckpointConfig().resolve_root()


def test_store_arguments_are_validated(tmp_path: Path) -> None:
    with pytest.raises(CheckpointConfigError, match="keep_last"):
        CheckpointStore(tmp_path, keep_last=1)
    with pytest.raises(CheckpointConfigError, match="resume"):
        CheckpointStore(tmp_path, resume="maybe")


def test_fault_hook_from_environment() -> None:
    assert FaultHook.from_env({}) is NO_FAULTS
    hook = FaultHook.from_env({"QCHECKPOINT_FAULT": "current.mid_write#3"})
    assert (hook.point, hook.hit) == ("current.mid_write", 3)
    for bad in ["nowhere", "current.mid_write#x", "current.mid_write#0"]:
        with pytest.raises(CheckpointConfigError, match="QCHECKPOINT_FAULT"):
            FaultHook.from_env({"QCHECKPOINT_FAULT": bad})
    counting = FaultHook(POINTS[0], hit=5)
    for _ in range(4):
        counting.reach(POINTS[0])  # below the selected hit: the process survives
    assert counting.counts[POINTS[0]] == 4
