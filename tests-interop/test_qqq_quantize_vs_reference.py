"""QQQ quantization against GPT-QModel 7.7.0: its own ``QQQ`` solve on the same layer gives, after its own
``QQQLinear.pack``, the very tensors lowbit writes; its loader (``QQQ_TORCH`` backend, CPU) reads a
lowbit-quantized QQQ checkpoint to the same dense weights, and its logits match lowbit's reload.

The reference's QQQ quantizer runs on CPU here (its MLX path is macOS-only, its fused block update CUDA-only).
The reference's QQQ kernels quantize activations to int8 per token (float16 compute); lowbit's torch module
multiplies the activations as given (float32), and loading at float16 rounds the float32 channel scales to
float16. The int8 weights are compared for equality, the channel scales after that rounding, the logits within
5% of their scale (measured 3.0%, cosine 0.99967) and much closer to the reference's than the dense model's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from peer_qqq import pack_with_reference
from qalgos.qqq import QQQ, qqq_spec
from qformats.layouts.qqq import pack_qqq
from reference import reference_logits
from tiny_llama import PROBE, save_tiny_llama
from torch import nn

OUT, IN = 192, 512


def _layer() -> tuple[torch.Tensor, list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(OUT, IN, generator=gen) * 0.02
    boost = 1 + 5 * (torch.rand(IN, generator=gen) > 0.95)
    return weight, [torch.randn(256, IN, generator=gen) * boost for _ in range(4)]


@pytest.mark.parametrize("group_size", [128, -1], ids=["g128", "per-channel"])
def test_same_tensors_as_the_reference_solve_and_pack(group_size: int) -> None:
    from gptqmodel import QuantizeConfig
    from gptqmodel.quantization.qqq import QQQ as ReferenceQQQ

    weight, batches = _layer()
    linear = nn.Linear(IN, OUT, bias=False)
    linear.weight.data = weight.clone()
    config = QuantizeConfig(method="qqq", format="qqq", bits=4, group_size=group_size, sym=True, desc_act=False)
    assert config.damp_percent == 0.005 and config.damp_auto_increment == 0.001
    task = ReferenceQQQ(module=linear, qcfg=config)
    task.quantizer.configure(4, perchannel=True, sym=True, mse=False, groupsize=group_size)  # as QQQProcessor does
    for x in batches:
        task.add_batch(x[None], None)
    q, scales, _zeros, _g_idx, _seconds, loss, _damp, s_extra, _n = task.quantize()
    theirs = pack_with_reference(q, scales, None if s_extra is None else s_extra.flatten(), group_size)

    ours = QQQ(IN, qqq_spec(group_size))
    for x in batches:
        ours.add_batch(x[None])
    result = ours.quantize(weight)
    assert result.loss == pytest.approx(loss, rel=1e-5)
    mine = pack_qqq(result.weight)
    assert sorted(mine) == sorted(theirs)
    for name, value in theirs.items():
        assert value.dtype == mine[name].dtype and np.array_equal(value, mine[name]), name


def test_reference_loads_lowbit_qqq_checkpoint(tmp_path: Path) -> None:
    import qhf
    from gptqmodel import GPTQModel

    source = save_tiny_llama(tmp_path / "src", hidden_size=128, intermediate_size=256)
    out = tmp_path / "lowbit-qqq"
    qm = qhf.load(source, {"method": "qqq", "bits": 4, "group_size": 128})
    qm.quantize(samples=4, length=48)
    qm.save(out)
    lowbit = qhf.load_quantized(out)

    ref = GPTQModel.load(str(out), backend="qqq_torch", device="cpu", dtype=torch.float16)
    assert type(ref.quantize_config).__name__ == "QQQConfig" and ref.quantize_config.damp_percent == 0.005
    modules = {name: m for name, m in ref.model.named_modules() if type(m).__name__ == "QQQTorchLinear"}
    assert sorted(modules) == sorted(qm.results) and len(modules) == 14
    grouped = 0
    for name, module in modules.items():
        int8_weight, s_channel = module._dequantize_weight_for_torch()
        weight = qm.results[name].weight
        grouped += weight.s_group is not None
        assert np.array_equal(int8_weight.T.numpy(), weight.int8_weight()), name
        # loading at float16 rounds the float32 channel scale to float16 (its post_init casts it back)
        assert np.array_equal(s_channel.numpy().ravel(), weight.s_channel.astype(np.float16).astype(np.float32))
    assert grouped == 2  # down_proj (in 256): two groups of 128; the rest (in 128 = group) per channel

    with torch.no_grad():
        ours = lowbit(input_ids=PROBE, use_cache=False).logits.float()
    theirs = reference_logits(ref)
    scale, diff = float(theirs.abs().max()), float((ours - theirs).abs().max())
    cos = float(torch.nn.functional.cosine_similarity(ours.flatten(), theirs.flatten(), dim=0))
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        dense = AutoModelForCausalLM.from_pretrained(source).eval()(input_ids=PROBE, use_cache=False).logits.float()
    dense_diff = float((dense - theirs).abs().max())
    print(f"QQQ logits vs reference: max abs diff {diff:.4g} of scale {scale:.4g} ({diff / scale:.3%}), cosine "
          f"{cos:.6f}; the dense model's differ by {dense_diff:.4g}")  # fmt: skip
    assert diff <= 0.05 * scale and cos > 0.999
    assert diff < 0.5 * dense_diff  # far closer to the reference than the unquantized model is
