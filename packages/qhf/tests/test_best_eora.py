"""``best`` with EoRA (what ``--preset best --target vllm`` runs) on a tiny llama: the rotation is folded, and every
module's adapter, applied to its dequantized rotated weight, brings the module's output closer to the rotated float
weight's on the calibration inputs (an adapter computed in the unrotated space would not)."""

from __future__ import annotations

import pytest
import qhf
import torch
from qhf.corpus import bundled_docs
from qhf.lora_adapter import LoraLinear
from qhf.presets import apply_preset
from qhf.tokenizer import token_blocks


@pytest.mark.parametrize("bits, group", [(4, 32), (2, 32)])
def test_best_eora_adapters_lower_each_rotated_modules_error(tiny_dirs, bits: int, group: int) -> None:
    config = apply_preset("best", {"bits": bits, "group_size": group}, target="vllm")
    assert config["adapter"] == {"rank": 32} and config["desc_act"] and config["mse"] == 2.0
    qm = qhf.load(tiny_dirs("llama"), config)
    rows = token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=8, length=48)
    summary = qm.quantize(rows)
    assert summary.rotation is not None and summary.rotation["residual"] and summary.rotation["heads"], summary.rotation
    assert summary.adapter is not None and summary.adapter["modules"] == 14

    inputs: dict[str, list[torch.Tensor]] = {}
    wrapped = {name: m for name, m in qm.model.named_modules() if isinstance(m, LoraLinear)}
    assert len(wrapped) == 14
    hooks = [
        m.register_forward_pre_hook(lambda _m, args, name=name: inputs.setdefault(name, []).append(args[0].detach()))
        for name, m in wrapped.items()
    ]
    with torch.no_grad():
        for row in rows:
            qm.model(input_ids=torch.tensor([row]), use_cache=False)
    for hook in hooks:
        hook.remove()

    for name, module in wrapped.items():
        x = torch.cat([t.reshape(-1, t.shape[-1]) for t in inputs[name]]).double()
        rotated = qm.source.tensor(f"{name}.weight").double()  # the float weight as the run read it (rotated)
        with torch.no_grad():
            quantized = module.base(x.float()).double()
            adapted = module(x.float()).double()
        want = x @ rotated.T
        before, after = float((quantized - want).norm()), float((adapted - want).norm())
        assert after < 0.9 * before, (name, before, after)
