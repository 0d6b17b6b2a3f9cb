"""transformers' Conv1D (GPT-2): a linear of the skeleton, its weight read transposed; quantized in the GPTQ /
AWQ layouts of an nn.Linear of the same widths; a dense one saved and reloaded in the files' [in, out] layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from qhf.architectures import definition_for
from qhf.architectures.conv1d import Conv1DLinear, conv1d_weights
from qhf.source.skeleton import meta_skeleton
from safetensors import safe_open
from tiny_models import save_tiny_model, tiny_config

GPT2 = {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 256}


def _stored(directory: Path) -> dict[str, torch.Tensor]:
    tensors = {}
    for shard in sorted(directory.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as handle:
            tensors.update({name: handle.get_tensor(name) for name in handle.keys()})
    return tensors


def test_gpt2_skeleton_has_linears_in_place_of_conv1d() -> None:
    config = tiny_config("gpt2", **GPT2)
    model = meta_skeleton(config)
    c_attn = model.get_submodule("transformer.h.0.attn.c_attn")
    assert isinstance(c_attn, Conv1DLinear)
    assert (c_attn.in_features, c_attn.out_features) == (64, 192)
    assert tuple(c_attn.weight.shape) == (192, 64)
    assert "transformer.h.1.mlp.c_proj.weight" in conv1d_weights(model)
    assert "lm_head.weight" not in conv1d_weights(model)  # an nn.Linear already
    found = definition_for(model, config)
    assert [(g.modules, g.prev_op) for g in found.definition.groups] == [
        (("attn.c_attn",), "ln_1"),
        (("attn.c_proj",), None),
        (("mlp.c_fc",), "ln_2"),
        (("mlp.c_proj",), None),
    ]


def _keep_dense(qm, name: str) -> None:
    """Undo the quantization of ``name`` in memory: its result dropped, the dense linear back with its source weight
    (a linear left dense, as discovery leaves one whose weight is read outside its call)."""
    qm.results.pop(name)
    dense = Conv1DLinear(*reversed(qm.source.tensor(f"{name}.weight").shape))
    dense.weight = torch.nn.Parameter(qm.source.tensor(f"{name}.weight"), requires_grad=False)
    dense.bias = torch.nn.Parameter(qm.source.tensor(f"{name}.bias"), requires_grad=False)
    parent, _, leaf = name.rpartition(".")
    setattr(qm.model.get_submodule(parent), leaf, dense)


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_gpt2_quantizes_with_a_dense_conv1d_and_reloads(method: str, tmp_path: Path) -> None:
    import qhf
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import token_blocks
    from transformers import AutoModelForCausalLM

    src = save_tiny_model(tmp_path / "src", "gpt2", **GPT2)
    qm = qhf.load(src, {"method": method, "bits": 4, "group_size": 32})
    qm.quantize(token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=32))
    ids = torch.randint(0, 300, (1, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        quantized = qm.model(ids, use_cache=False).logits
        reference = AutoModelForCausalLM.from_pretrained(src).eval()(ids, use_cache=False).logits
    # 4-bit of the tiny model: well under the error of a weight read in the wrong layout (relative error ~1)
    assert ((quantized - reference).norm() / reference.norm()).item() < 0.5
    _keep_dense(qm, "transformer.h.0.mlp.c_proj")
    out = tmp_path / "out"
    qm.save(out)  # verifies: saved tensors against the in-memory ones, reloaded logits against in-memory ones
    saved, source = _stored(out), _stored(src)
    # a quantized Conv1D: the layout of an nn.Linear of in 64, out 192
    if method == "gptq":  # qweight [in / 8, out]
        assert tuple(saved["transformer.h.0.attn.c_attn.qweight"].shape) == (8, 192)
    else:  # AWQ GEMM: qweight [in, out / 8]
        assert tuple(saved["transformer.h.0.attn.c_attn.qweight"].shape) == (64, 24)
    assert "transformer.h.0.attn.c_attn.weight" not in saved
    # the dense Conv1D keeps the files' [in, out] layout and its values
    dense = "transformer.h.0.mlp.c_proj.weight"
    assert tuple(saved[dense].shape) == (256, 64)
    assert torch.equal(saved[dense], source[dense])
    assert "transformer.h.1.mlp.c_proj.qweight" in saved
    loaded = qhf.load_quantized(out)
    assert torch.equal(loaded.model.get_submodule("transformer.h.0.mlp.c_proj").weight, source[dense].t())
    with torch.no_grad():
        assert torch.equal(loaded(ids, use_cache=False).logits, qm.model(ids, use_cache=False).logits)
