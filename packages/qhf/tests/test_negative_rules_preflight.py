"""A negative ``dynamic`` rule naming a decoder-layer module is refused before any work (the layer loop quantizes
every module of its groups, and the writer would refuse the result at save); rules outside the layers are kept."""

from __future__ import annotations

from pathlib import Path

import pytest
import qhf
from qhf.errors import QHFError
from tiny_models import save_tiny_model


@pytest.mark.parametrize("method", [{"method": "gptq", "bits": 4, "group_size": 32}, {"method": "fp8"}])
def test_a_rule_keeping_a_layer_module_dense_is_refused_before_calibration(tmp_path: Path, method: dict) -> None:
    src = save_tiny_model(tmp_path / "src", "llama")
    model = qhf.load(src, {**method, "dynamic": {"-:.*mlp\\.down_proj": {}}})
    with pytest.raises(QHFError, match=r"dynamic\['-:\.\*mlp\\\\\.down_proj'\] keeps model\.layers\.0\.mlp\.down_proj"):
        model.quantize(["never read: refused before calibration"])
    assert model.results is None
    assert not (tmp_path / "out").exists()


def test_a_rule_outside_the_layers_is_kept(tmp_path: Path) -> None:
    src = save_tiny_model(tmp_path / "src", "llama")
    model = qhf.load(src, {"method": "rtn", "bits": 4, "group_size": 32, "dynamic": {"-:^visual\\b": {}}})
    model.quantize()
    assert model.results is not None
