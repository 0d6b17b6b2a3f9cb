"""Whole-directory transcodes: every module bit exact, config rewritten, impossible modules named."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from checkpoint_fixtures import build
from qformats.checkpoint import open_checkpoint, transcode_checkpoint
from qformats.errors import TranscodeError


@pytest.mark.parametrize("to", ["gptq_v2", "gptq", "gemv", "gemv_fast", "llm-awq", "awq_marlin"])
def test_awq_checkpoint_transcodes_to_every_layout_that_can_hold_it(tmp_path: Path, to: str) -> None:
    weights = build(tmp_path / "src", max_shard_size=3000)
    if to == "gptq":  # v1 stores zero - 1: keep the fixture's zeros >= 1
        weights = build(tmp_path / "src", sym=True)
    transcode_checkpoint(tmp_path / "src", tmp_path / "dst", to=to, max_shard_size=4000)
    ck = open_checkpoint(tmp_path / "dst")
    expected = "awq_marlin" if to == "awq_marlin" else to
    assert {e.layout for e in ck.modules()} == {expected}
    for entry in ck.modules():
        got, want = ck.unpack(entry), weights[entry.prefix]
        assert np.array_equal(got.codes, want.codes) and np.array_equal(got.zeros, want.zeros)
        assert np.array_equal(got.scales.view(np.uint16), want.scales.view(np.uint16))
    qc = json.loads((tmp_path / "dst" / "quantize_config.json").read_text())
    assert qc["bits"] == 4 and qc["group_size"] == 32
    assert qc["quant_method"] == ("gptq" if to.startswith("gptq") else "awq")
    cfg = json.loads((tmp_path / "dst" / "config.json").read_text())
    assert cfg["quantization_config"] == qc and cfg["model_type"] == "llama"
    bias = ck.load("model.layers.0.mlp.up_proj.bias")
    assert np.array_equal(bias, np.linspace(-1, 1, 64).astype(np.float16))


def test_impossible_target_names_the_module_and_writes_nothing(tmp_path: Path) -> None:
    build(tmp_path / "src")  # asymmetric AWQ
    with pytest.raises(TranscodeError, match=r"model\.layers\.0\.mlp\.up_proj.*symmetric only"):
        transcode_checkpoint(tmp_path / "src", tmp_path / "dst", to="marlin")
    assert not (tmp_path / "dst").exists()


def test_gptq_to_marlin_and_back(tmp_path: Path) -> None:
    weights = build(tmp_path / "src", layout="gptq", sym=True)
    transcode_checkpoint(tmp_path / "src", tmp_path / "marlin", to="marlin")
    transcode_checkpoint(tmp_path / "marlin", tmp_path / "back", to="gptq")
    src = (tmp_path / "src" / "model.safetensors").read_bytes()
    back = (tmp_path / "back" / "model.safetensors").read_bytes()
    assert src == back
    ck = open_checkpoint(tmp_path / "marlin")
    assert {e.layout for e in ck.modules()} == {"marlin"}
    assert all(ck.unpack(e).equals(weights[e.prefix]) for e in ck.modules())
