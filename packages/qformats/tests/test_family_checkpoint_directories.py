"""QQQ, ParoQuant, VPTQ and EXL3 checkpoint directories: enumerate, inspect, validate, dequantize, convert."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from checkpoint_fixtures import build
from family_checkpoints import PREFIXES, build_family, family_config
from qformats import validate
from qformats.checkpoint import Checkpoint, dequantize_checkpoint, transcode_checkpoint, write_checkpoint
from qformats.checkpoint.safetensors_io import SafetensorsFile
from qformats.config import parse_config
from qformats.errors import CheckpointFormatError, ConfigError, TranscodeError
from qformats.inspect import inspect, main

FAMILIES = ("qqq", "paroquant", "vptq", "exl3")


def tensors_of(path: Path) -> dict[str, np.ndarray]:
    files = [SafetensorsFile(p) for p in sorted(path.glob("*.safetensors"))]
    return {name: f.load(name) for f in files for name in f.tensors}


def rewrite(path: Path, tensors: dict[str, np.ndarray], config: dict[str, object]) -> None:
    """Write ``tensors`` unvalidated (a malformed checkpoint a third-party tool could have produced)."""
    write_checkpoint(path, tensors, quantize_config=config, model_config={"model_type": "llama"}, validate=False)


@pytest.mark.parametrize("family", FAMILIES)
def test_directory_is_enumerated_inspected_and_dequantized(tmp_path: Path, family: str) -> None:
    dense = build_family(tmp_path / family, family)
    summary = inspect(tmp_path / family)
    assert summary.layout == family and summary.violation_count == 0
    assert [(m.name, m.layout, m.in_features, m.out_features) for m in summary.modules] == [
        (p, family, 128, 128) for p in sorted(PREFIXES)
    ]
    assert summary.dense_tensors == 3  # two biases and the norm
    assert main([str(tmp_path / family)]) == 0
    ck = Checkpoint(tmp_path / family)
    for entry in ck.modules():
        assert np.array_equal(ck.dense(entry), dense[entry.prefix])
    dequantize_checkpoint(tmp_path / family, tmp_path / "dense", dtype="float32")
    out = tensors_of(tmp_path / "dense")
    for prefix in PREFIXES:
        assert np.array_equal(out[f"{prefix}.weight"], dense[prefix])
        assert f"{prefix}.bias" in out


def test_exl3_bits_per_weight_comes_from_each_trellis(tmp_path: Path) -> None:
    build_family(tmp_path / "x", "exl3")
    summary = inspect(tmp_path / "x")
    assert {m.bits for m in summary.modules} == {3}  # the config says 2.5 bpw (an average)
    assert json.loads((tmp_path / "x" / "quantize_config.json").read_text())["bits"] == 2.5


def corrupt(family: str, tensors: dict[str, np.ndarray]) -> tuple[str, str]:
    """Break one tensor of the first module; returns (the rule id expected, the tensor name)."""
    head = PREFIXES[0]
    if family == "qqq":
        tensors[f"{head}.s_channel"] = tensors[f"{head}.s_channel"].astype(np.float16)
        return "QQQ-DTYPE-S_CHANNEL", f"{head}.s_channel"
    if family == "paroquant":
        theta = tensors[f"{head}.theta"].copy()
        theta[0, 0] = np.nan
        tensors[f"{head}.theta"] = theta
        return "PARO-THETA-VALUE", f"{head}.theta"
    if family == "vptq":
        perm = tensors[f"{head}.perm"].copy()
        perm[1] = perm[0]
        tensors[f"{head}.perm"] = perm
        return "VPTQ-PERM", f"{head}.perm"
    tensors[f"{head}.su"] = np.ones(128, np.float16)
    return "EXL3-UNSUPPORTED", f"{head}.su"


@pytest.mark.parametrize("family", FAMILIES)
def test_malformed_module_is_reported_by_rule_and_refused(tmp_path: Path, family: str) -> None:
    build_family(tmp_path / "good", family)
    tensors = tensors_of(tmp_path / "good")
    rule, name = corrupt(family, tensors)
    rewrite(tmp_path / "bad", tensors, family_config(family))
    summary = inspect(tmp_path / "bad")
    found = [v for m in summary.modules for v in m.violations]
    assert len(found) == 1 and found[0].startswith(f"[{rule}]"), found
    assert main([str(tmp_path / "bad")]) == 1
    shapes = {prefix: (128, 128) for prefix in PREFIXES}  # VPTQ's dims are not in its tensors
    flat = validate(tensors, parse_config(family_config(family)), shapes=shapes)
    assert [(v.rule, v.tensor) for v in flat] == [(rule, name)]
    ck = Checkpoint(tmp_path / "bad")
    with pytest.raises(CheckpointFormatError, match=PREFIXES[0].replace(".", r"\.")):
        ck.dense(next(e for e in ck.modules() if e.prefix == PREFIXES[0]))
    with pytest.raises(CheckpointFormatError, match=rule):
        write_checkpoint(tmp_path / "again", tensors, quantize_config=family_config(family), model_config=None)


def test_negative_dynamic_rule_on_a_family_module_is_config_excluded(tmp_path: Path) -> None:
    build_family(tmp_path / "x", "qqq")
    config = {**family_config("qqq"), "dynamic": {"-:.*down_proj": {}}}
    rewrite(tmp_path / "y", tensors_of(tmp_path / "x"), config)
    problems = Checkpoint(tmp_path / "y").validate()
    assert [v.rule for v in problems["model.layers.0.mlp.down_proj"]] == ["CONFIG-EXCLUDED"]
    assert problems["model.layers.0.mlp.down_proj"][0].tensor == "model.layers.0.mlp.down_proj.B"


def test_vptq_dims_not_pinned_by_the_tensors_are_skipped_with_a_warning_until_given(tmp_path: Path) -> None:
    build_family(tmp_path / "x", "vptq")
    tensors = {k: v for k, v in tensors_of(tmp_path / "x").items() if not k.endswith(".perm")}
    config = {**family_config("vptq"), "enable_perm": False, "enable_norm": False}  # the reference's defaults
    for prefix in PREFIXES:
        del tensors[f"{prefix}.weight_scale"], tensors[f"{prefix}.weight_bias"]
    write_checkpoint(tmp_path / "y", tensors, quantize_config=config, model_config=None)
    summary = inspect(tmp_path / "y")
    assert summary.violation_count == 0 and len(summary.warnings) == 2
    assert all("not recoverable" in w and "shapes=" in w for w in summary.warnings)
    with pytest.raises(CheckpointFormatError, match="pass shapes="):
        ck = Checkpoint(tmp_path / "y")
        ck.dense(ck.modules()[0])
    ck = Checkpoint(tmp_path / "y", shapes={prefix: (128, 128) for prefix in PREFIXES})
    assert ck.validate() == {} and not ck.warnings
    assert all(ck.dense(e).shape == (128, 128) for e in ck.modules())
    wrong = Checkpoint(tmp_path / "y", shapes={prefix: (128, 96) for prefix in PREFIXES})
    assert {v.rule for found in wrong.validate().values() for v in found} == {"VPTQ-SHAPE-INDICES"}


@pytest.mark.parametrize(("family", "to"), [("qqq", "gptq"), ("qqq", "gptq_v2"), ("paroquant", "gemm")])
def test_exact_family_conversions_round_trip(tmp_path: Path, family: str, to: str) -> None:
    dense = build_family(tmp_path / "src", family)
    transcode_checkpoint(tmp_path / "src", tmp_path / "mid", to=to)
    mid = Checkpoint(tmp_path / "mid")
    assert mid.fields.layout == to and mid.validate() == {}
    for entry in mid.modules():
        assert np.array_equal(mid.dense(entry), dense[entry.prefix])
    transcode_checkpoint(tmp_path / "mid", tmp_path / "back", to=family)
    back = Checkpoint(tmp_path / "back")
    assert back.fields.layout == family and back.validate() == {}
    for entry in back.modules():
        assert np.array_equal(back.dense(entry), dense[entry.prefix])


@pytest.mark.parametrize(
    ("family", "to", "message"),
    [
        ("paroquant", "gemm", "rotates and scales its inputs"),
        ("vptq", "gptq", "'vptq' is not a scalar-code layout"),
        ("exl3", "gemm", "'exl3' is not a scalar-code layout"),
    ],
)
def test_conversions_without_an_exact_path_are_refused_by_name(
    tmp_path: Path, family: str, to: str, message: str
) -> None:
    build_family(tmp_path / "src", family, identity=False)
    with pytest.raises(TranscodeError, match=message):
        transcode_checkpoint(tmp_path / "src", tmp_path / "out", to=to)
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").glob("*.safetensors"))


@pytest.mark.parametrize(
    ("layout", "sym", "message"), [("gptq", True, "needs s_channel"), ("gemm", False, "symmetric with zero point 8")]
)
def test_weights_qqq_cannot_hold_are_refused_by_name(tmp_path: Path, layout: str, sym: bool, message: str) -> None:
    build(tmp_path / "src", layout, sym=sym, layers=1)  # grouped (group_size 32) 4-bit
    with pytest.raises(TranscodeError, match=f"model.layers.0.mlp.up_proj.*{message}"):
        transcode_checkpoint(tmp_path / "src", tmp_path / "out", to="qqq")


@pytest.mark.parametrize("bits", [3.0, 2.5, 4])
def test_exl3_config_accepts_float_bits_per_weight(bits: float) -> None:
    cfg = parse_config(family_config("exl3") | {"bits": bits})
    assert cfg.layout == "exl3" and cfg.bits == bits and cfg.width == int(np.ceil(bits))
    assert cfg.to_dict()["bits"] == bits


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"bits": 2.5, "quant_method": "gptq", "format": "gptq"}, "bits: expected an integer, found 2.5"),
        ({"bits": 9.0, "quant_method": "exl3", "format": "exl3"}, "bits per weight in 1..8, found 9.0"),
        ({"bits": float("inf"), "quant_method": "exl3"}, "finite EXL3 bits-per-weight"),
    ],
)
def test_float_bits_outside_exl3_or_its_range_are_refused(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(fields)
