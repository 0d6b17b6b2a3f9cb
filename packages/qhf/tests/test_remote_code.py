"""A model directory's own Python (``auto_map``) never runs: refused by name, no prompt, no import."""

from __future__ import annotations

import json
import shutil

import pytest
import qhf
from qhf.source.remote_code import RemoteCodeRefusedError

EVIL = "import pathlib\npathlib.Path(__file__).with_name('RAN').write_text('code ran')\n"


def _with_auto_map(tmp_path, src, model_type: str):
    model = tmp_path / "remote"
    shutil.copytree(src, model)
    config = json.loads((model / "config.json").read_text())
    config["model_type"] = model_type
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModelForCausalLM": "modeling_evil.Evil"}
    (model / "config.json").write_text(json.dumps(config))
    (model / "configuration_evil.py").write_text(EVIL)
    (model / "modeling_evil.py").write_text(EVIL)
    return model


def test_an_unknown_architecture_in_code_is_refused_naming_the_auto_map_entry(tmp_path, tiny_dirs, monkeypatch) -> None:
    model = _with_auto_map(tmp_path, tiny_dirs("llama"), "evil_arch")
    monkeypatch.setattr("builtins.input", lambda *a: pytest.fail("transformers asked whether to run remote code"))
    with pytest.raises(RemoteCodeRefusedError, match=r"config\.json: auto_map\.AutoConfig -> 'configuration_evil"):
        qhf.load(model, {"method": "rtn", "bits": 4, "group_size": 32})
    assert not (model / "RAN").exists()


def test_a_known_model_type_with_an_auto_map_loads_with_transformers_own_classes(tmp_path, tiny_dirs) -> None:
    model = _with_auto_map(tmp_path, tiny_dirs("llama"), "llama")
    qm = qhf.load(model, {"method": "rtn", "bits": 4, "group_size": 32})
    assert type(qm.model).__module__.startswith("transformers.")
    assert not (model / "RAN").exists()
