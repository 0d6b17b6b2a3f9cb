"""GPTAQ / FOEM against GPT-QModel 7.7.0: its own ``GPTAQ`` / ``FOEM`` classes on the same layer, native and
quantized-path activations give the weights qalgos gives; its loader reads a lowbit GPTAQ checkpoint.

The layer is test_gptq_solve_vs_reference's (``[192, 576]``, group 128 with a partial last group); the
native activations are the quantized-path ones plus noise. The reference's GPTAQ/FOEM solves visit columns
in natural order even when its config says ``act_group_aware=True`` (its default), which is why qhf resolves
``act_group_aware`` off for them; the second half of the parametrization checks that on the reference.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cases import as_dtype, assert_logits_close
from lowbit_side import lowbit_logits, lowbit_weights
from qalgos.gptaq import GPTAQ, AsymmetricSpec
from qalgos.spec import QuantSpec
from reference import load_with_reference, quantized_modules, reference_dense, reference_logits
from torch import nn

OUT, IN = 192, 576


def _layer() -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(OUT, IN, generator=gen) * 0.02
    boost = 1 + 5 * (torch.rand(IN, generator=gen) > 0.95)
    batches = [torch.randn(256, IN, generator=gen) * boost for _ in range(4)]
    natives = [x + 0.1 * torch.randn(x.shape, generator=gen) * boost for x in batches]
    return weight, batches, natives


def _reference(terms: AsymmetricSpec, act_group_aware: bool) -> torch.Tensor:
    from gptqmodel import QuantizeConfig
    from gptqmodel.quantization.config import FOEMConfig, GPTAQConfig
    from gptqmodel.quantization.foem import FOEM
    from gptqmodel.quantization.gptaq import GPTAQ as ReferenceGPTAQ

    weight, batches, natives = _layer()
    linear = nn.Linear(IN, OUT, bias=False)
    linear.weight.data = weight.clone()
    linear.state = {"native_inp": [n[None].clone() for n in natives]}  # what its NativeProcessor leaves
    kwargs = {"bits": 4, "group_size": 128, "sym": True, "act_group_aware": act_group_aware}
    if terms.method == "gptaq":
        config = QuantizeConfig(gptaq=GPTAQConfig(alpha=terms.alpha, device="cpu"), **kwargs)
        task = ReferenceGPTAQ(module=linear, qcfg=config)
    else:
        config = QuantizeConfig(foem=FOEMConfig(alpha=terms.alpha, beta=terms.beta, device="cpu"), **kwargs)
        task = FOEM(module=linear, qcfg=config)
    task.quantizer.configure(perchannel=True)
    for x in batches:
        task.add_batch(x[None], None)
    return task.quantize()[0]


def _ours(terms: AsymmetricSpec) -> torch.Tensor:
    weight, batches, natives = _layer()
    task = GPTAQ(IN, QuantSpec(bits=4, group_size=128, sym=True), terms)
    for x, native in zip(batches, natives, strict=True):
        task.add_pair(x[None], native[None])
    return task.quantize(weight).dequantized


TERMS = [AsymmetricSpec("gptaq", 0.25), AsymmetricSpec("foem", 0.0, 0.2), AsymmetricSpec("foem", 0.25, 0.2)]


@pytest.mark.parametrize("act_group_aware", [False, True], ids=["natural", "gar-ignored"])
@pytest.mark.parametrize("terms", TERMS, ids=["gptaq", "foem", "foem+gptaq"])
def test_same_weights_as_the_reference_solve(terms: AsymmetricSpec, act_group_aware: bool) -> None:
    """Equal to float32 rounding; at most 0.2% of entries one code apart (FOEM alpha 0: 0.05% measured)."""
    theirs, ours = _reference(terms, act_group_aware), _ours(terms)
    differ = float(((theirs - ours).abs() > 1e-6).float().mean())
    assert differ < 0.002, f"{differ:.4%} of the entries differ"


def test_reference_loads_lowbit_gptaq_checkpoint(tmp_path: Path, tiny_source: Path) -> None:
    import qhf

    out = tmp_path / "lowbit-gptaq"
    qm = qhf.load(tiny_source, {"method": "gptq", "bits": 4, "group_size": 32, "gptaq": {"alpha": 0.25}})
    qm.quantize(samples=4, length=48)
    qm.save(out)
    written = json.loads((out / "quantize_config.json").read_text())
    assert written["meta"]["gptaq"] == {"alpha": 0.25, "device": "auto"}

    ref = load_with_reference(out, "gptq")
    assert ref.quantize_config.gptaq is not None and ref.quantize_config.gptaq.alpha == 0.25
    modules = quantized_modules(ref)
    assert sorted(modules) == sorted(qm.results) and len(modules) == 14
    from_file = lowbit_weights(out)
    for name, module in modules.items():
        assert from_file[name].equals(qm.results[name].weight), name
        theirs = reference_dense(module)
        assert torch.equal(theirs, as_dtype(qm.results[name].weight.dequantize(), theirs.dtype)), name
    assert_logits_close(lowbit_logits(out), reference_logits(ref))


def test_eora_adapter_matches_the_reference_computation() -> None:
    """qalgos' EoRA factors against GPT-QModel's ``eora_compute_lora`` on the same error and covariance:
    the same ``B A`` to float32 rounding (the factors themselves agree too: same eigen/SVD recipe)."""
    from gptqmodel.eora.eora import eora_compute_lora
    from qalgos.eora import eora_adapter

    weight, batches, _ = _layer()
    task = GPTAQ(IN, QuantSpec(bits=4, group_size=128), AsymmetricSpec("foem", 0.0, 0.0))
    for x in batches:
        task.add_pair(x[None], x[None])
    error = weight - task.quantize(weight).dequantized
    covariance = sum(x.T @ x for x in batches) / len(batches)
    a_ref, b_ref = eora_compute_lora(error, "layer", covariance, 32, torch.float32, torch.device("cpu"))
    ours = eora_adapter(error, covariance, 32)
    assert torch.allclose(ours.delta(), b_ref @ a_ref, atol=1e-6, rtol=1e-4)
    scale = float((b_ref @ a_ref).abs().max())
    assert float((ours.delta() - b_ref @ a_ref).abs().max()) <= 1e-4 * scale


def test_reference_loads_lowbit_eora_adapter(tmp_path: Path, tiny_source: Path) -> None:
    """GPT-QModel reads the adapter lowbit names in quantize_config.json (``adapter: {name, path, rank}``,
    a directory inside the checkpoint) and its logits match lowbit's reload, which differ from the same
    checkpoint without the adapter."""
    import qhf

    out = tmp_path / "lowbit-eora"
    qm = qhf.load(tiny_source, {"method": "gptq", "bits": 4, "group_size": 32, "adapter": {"rank": 8}})
    qm.quantize(samples=4, length=48)
    qm.save(out)
    ref = load_with_reference(out, "gptq")
    adapter = ref.quantize_config.adapter
    assert adapter is not None and adapter.rank == 8
    ours, theirs = lowbit_logits(out), reference_logits(ref)
    assert_logits_close(ours, theirs)
    config = json.loads((out / "quantize_config.json").read_text())
    config.pop("adapter")
    (out / "quantize_config.json").write_text(json.dumps(config))
    without, theirs_without = lowbit_logits(out), reference_logits(load_with_reference(out, "gptq"))
    # the adapter moves both tools' logits by the same amount, well beyond the float16 noise between them
    assert float((without - ours).abs().max()) > 10 * float((ours - theirs).abs().max())
    assert_logits_close(ours - without, theirs - theirs_without, rel=0.05)
