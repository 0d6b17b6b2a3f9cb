"""EoRA through qhf on a tiny llama: the adapter directory in the reference's layout, reloaded around the
quantized modules with the in-memory logits, and the adapted model closer to the float model than GPTQ."""

from __future__ import annotations

import json
import shutil
import stat

import pytest
import qhf
import torch
from qhf.checkpoint_config import checkpoint_dict
from qhf.config_view import adapter
from qhf.corpus import bundled_docs
from qhf.errors import SourceFormatError
from qhf.lora_adapter import LoraLinear
from qhf.quant_config import QuantConfigError, read_quantize_config
from qhf.tokenizer import token_blocks
from safetensors.torch import load_file

PROBE = torch.tensor([[0, *range(5, 45)]])


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=PROBE, use_cache=False).logits.float()


def test_adapter_field_parses_and_bad_values_are_named() -> None:
    config = read_quantize_config({"method": "gptq", "adapter": {"rank": 16}})
    assert adapter(config) == {"name": "lora", "path": "eora", "rank": 16}
    assert checkpoint_dict(config)["adapter"] == {"name": "lora", "path": "eora", "rank": 16}
    for config, match in (
        ({"adapter": {"rank": 0}}, "adapter.rank"),
        ({"adapter": {"rank": 4, "path": "../x"}}, "adapter.path"),
        ({"adapter": {"rank": 4, "name": "dora"}}, "adapter.name"),
        ({"method": "awq", "adapter": {"rank": 4}}, "method 'awq'"),
        ({"method": "fp8", "adapter": {"rank": 4}}, "method 'fp8'"),
    ):
        with pytest.raises(QuantConfigError, match=match):
            read_quantize_config(config)


def test_eora_quantize_save_reload(tmp_path, tiny_dirs) -> None:
    from transformers import AutoModelForCausalLM

    src = tiny_dirs("llama")
    base = {"method": "gptq", "bits": 3, "group_size": 32}
    logits = {}
    for name, extra in (("gptq", {}), ("eora", {"adapter": {"rank": 8}})):
        qm = qhf.load(src, {**base, **extra})
        summary = qm.quantize(token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=48))
        logits[name] = _logits(qm.model)
    assert summary.adapter == {"name": "lora", "path": "eora", "rank": 8, "modules": 14}
    assert sum(isinstance(m, LoraLinear) for m in qm.model.modules()) == 14
    original = _logits(AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval())
    err = {k: float(((v - original) ** 2).mean()) for k, v in logits.items()}
    assert err["eora"] < err["gptq"], err

    out = tmp_path / "q"
    saved = qm.save(out)
    assert saved.verified  # the reload (adapters included) gives the same logits
    assert json.loads((out / "quantize_config.json").read_text())["adapter"]["rank"] == 8
    adapter_file = out / "eora" / "adapter_model.safetensors"
    # readable like the model's weights (safetensors itself creates files 0600)
    assert stat.S_IMODE(adapter_file.stat().st_mode) == stat.S_IMODE((out / "model.safetensors").stat().st_mode)
    tensors = load_file(str(adapter_file))
    a = tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"]
    b = tensors["base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"]
    assert len(tensors) == 28 and a.shape == (8, 64) and b.shape[1] == 8 and a.dtype == torch.float32
    peft = json.loads((out / "eora" / "adapter_config.json").read_text())
    assert peft["r"] == peft["lora_alpha"] == 8 and peft["peft_type"] == "LORA"
    reloaded = _logits(qhf.load_quantized(out))
    assert torch.allclose(reloaded, logits["eora"], atol=1e-4)
    dense = qhf.export_dense(out, tmp_path / "dense", dtype=torch.float32)  # the adapter folded in
    folded = _logits(AutoModelForCausalLM.from_pretrained(dense, dtype=torch.float32).eval())
    assert torch.allclose(folded, reloaded, atol=1e-3), float((folded - reloaded).abs().max())

    shutil.move(out / "eora", tmp_path / "eora-elsewhere")  # the adapter named by the config, linked outside
    (out / "eora").symlink_to(tmp_path / "eora-elsewhere")
    with pytest.raises(SourceFormatError, match=r"adapter_model\.safetensors: a symlink to .*, outside"):
        qhf.load_quantized(out)
    (out / "eora").unlink()
    shutil.move(tmp_path / "eora-elsewhere", out / "eora")
    (out / "eora" / "adapter_model.safetensors").unlink()
    with pytest.raises(SourceFormatError, match=r"adapter_model\.safetensors: missing"):
        qhf.load_quantized(out)
