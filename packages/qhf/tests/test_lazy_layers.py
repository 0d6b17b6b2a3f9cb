"""Layers are read from the files only when the loop reaches them, the modules outside the layers are released
meanwhile, and no dense linear survives quantization."""

from __future__ import annotations

import qhf
from qhf.corpus import bundled_docs
from qhf.source import meta_parameters
from qhf.tokenizer import token_blocks
from tiny_models import save_tiny_model
from torch import nn


def test_layers_materialize_in_order_and_dense_weights_are_dropped(tmp_path, tokenizer) -> None:
    src = save_tiny_model(tmp_path / "m", "llama", tokenizer=tokenizer, num_hidden_layers=4)
    qm = qhf.load(src, {"method": "gptq", "bits": 4, "group_size": 32})
    assert len(meta_parameters(qm.model)) == len(list(qm.model.parameters()))  # nothing read at load
    seen: list[tuple[int, list[int]]] = []
    original = qm.source.materialize_layer

    base_on_meta: list[bool] = []

    def spy(index: int) -> int:
        on_meta = meta_parameters(qm.model)
        pending = sorted({int(n.split(".")[2]) for n in on_meta if n.startswith("model.layers.")})
        seen.append((index, pending))
        base_on_meta.append({"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"} <= set(on_meta))
        return original(index)

    qm.source.materialize_layer = spy  # type: ignore[method-assign]
    caches: list[object] = []

    def record(_module, _args, kwargs):
        caches.append(kwargs.get("past_key_values"))

    handle = qm.model.get_submodule("model.layers.1").register_forward_pre_hook(record, with_kwargs=True)
    summary = qm.quantize(token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=32))
    handle.remove()
    # replayed layer calls never carry a KV cache (it would grow with every capture forward)
    assert caches and all(c is None for c in caches)
    # each layer is materialized once, in order, while every later layer is still on meta
    assert [i for i, _ in seen] == [0, 1, 2, 3]
    for index, pending in seen:
        assert pending == list(range(index, 4))
    assert summary.largest_layer_bytes > 0
    # embeddings, final norm and lm_head are released while the layers are quantized, read back after
    assert base_on_meta == [True] * 4
    layers = qm.model.get_submodule("model.layers")
    dense = [n for n, m in layers.named_modules() if isinstance(m, nn.Linear)]
    assert dense == []  # every linear became a qkernels module
    assert meta_parameters(qm.model) == []
