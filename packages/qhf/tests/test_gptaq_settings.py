"""GPTAQ / FOEM settings: the reference's ``gptaq`` / ``foem`` sections (top level or under ``meta``), their
checkpoint form, bad values named; a tiny llama quantized with GPTAQ saves, reloads and differs from GPTQ."""

from __future__ import annotations

import json

import pytest
import qhf
import torch
from qhf.checkpoint_config import checkpoint_dict
from qhf.config_view import setting, solver_variant
from qhf.corpus import bundled_docs
from qhf.quant_config import QuantConfigError, read_quantize_config
from qhf.tokenizer import token_blocks

PROBE = torch.tensor([[0, *range(5, 45)]])


def test_sections_parse_from_top_level_and_meta() -> None:
    top = read_quantize_config({"method": "gptq", "gptaq": {"alpha": 0.5, "device": "cpu"}})
    assert solver_variant(top) == ("gptaq", {"alpha": 0.5})
    meta = read_quantize_config({"method": "gptq", "meta": {"foem": {"alpha": 0, "beta": 0.2, "device": "auto"}}})
    assert solver_variant(meta) == ("foem", {"alpha": 0.0, "beta": 0.2})
    assert setting(read_quantize_config({"gptaq": {}}), "gptaq") == {"alpha": 0.25}  # GPTAQConfig()'s default
    assert solver_variant(read_quantize_config({"meta": {"gptaq": None}})) is None  # what a reference GPTQ writes
    written = checkpoint_dict(top)
    assert written["method"] == "gptq" and written["meta"]["gptaq"] == {"alpha": 0.5, "device": "auto"}
    assert "gptaq" not in written
    assert solver_variant(read_quantize_config(written)) == solver_variant(top)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"gptaq": {"alpha": 2}}, r"gptaq\.alpha"),
        ({"foem": {"beta": "x"}}, r"foem\.beta"),
        ({"gptaq": {"alpah": 0.1}}, "unknown keys"),
        ({"gptaq": {}, "foem": {}}, "choose one"),
        ({"method": "awq", "gptaq": {}}, "method 'awq'"),
        ({"gptaq": 0.3}, "expected a dict"),
    ],
)
def test_bad_sections_are_named(config: dict, match: str) -> None:
    with pytest.raises(QuantConfigError, match=match):
        read_quantize_config(config)


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROBE, use_cache=False).logits.float()


def test_gptaq_quantize_save_reload(tmp_path, tiny_dirs) -> None:
    src = tiny_dirs("llama")
    base = {"method": "gptq", "bits": 4, "group_size": 32}
    runs = {}
    for name, extra in (("gptq", {}), ("gptaq", {"gptaq": {"alpha": 0.25}})):
        qm = qhf.load(src, {**base, **extra})
        qm.quantize(token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=48))
        runs[name] = (qm, _logits(qm.model))
    qm, in_memory = runs["gptaq"]
    assert not torch.equal(in_memory, runs["gptq"][1])  # the native-input term changed the solve
    out = tmp_path / "q"
    saved = qm.save(out)
    assert saved.verified
    config = json.loads((out / "quantize_config.json").read_text())
    assert config["meta"]["gptaq"] == {"alpha": 0.25, "device": "auto"} and config["method"] == "gptq"
    summary = json.loads((out / "quant_report.json").read_text())["summary"]
    assert summary["algorithm"] == {"name": "gptaq", "alpha": 0.25}
    reloaded = _logits(qhf.load_quantized(out))
    assert torch.allclose(reloaded, in_memory, atol=1e-4), float((reloaded - in_memory).abs().max())
