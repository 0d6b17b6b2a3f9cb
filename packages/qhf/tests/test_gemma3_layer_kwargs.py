"""Each decoder layer is calibrated with its own call kwargs: Gemma 3 passes sliding-window layers and full
attention layers different masks and rotary embeddings, and the captured cache must give layer ``i`` what a
plain forward of the model gives it (not layer 0's)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from qlooper.calibration import prepare_calibration
from qlooper.capture import CACHE_KWARGS, capture_first_layer_inputs
from qlooper.forward import replay_forward
from qlooper.layer_kwargs import same_kwargs
from tiny_models import save_tiny_model, tiny_config

LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]
GEMMA = {"num_hidden_layers": 4, "layer_types": LAYER_TYPES, "sliding_window": 8}


def _model() -> Any:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    config = tiny_config("gemma3_text", **GEMMA)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def _calibration() -> Any:
    generator = torch.Generator().manual_seed(1)
    rows = [torch.randint(2, 300, (n,), generator=generator).tolist() for n in (32, 27, 30, 21)]
    return prepare_calibration(rows, batch_size=2, max_length=32, min_length=4)


def _forward_calls(model: Any, calibration: Any) -> list[list[tuple[torch.Tensor, dict[str, Any]]]]:
    """Per batch, per layer: the hidden state and kwargs a plain forward of the model passes the layer."""
    calls: list[list[tuple[torch.Tensor, dict[str, Any]]]] = []

    def record(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        calls[-1].append((args[0].clone(), {k: v for k, v in kwargs.items() if k not in CACHE_KWARGS}))

    handles = [layer.register_forward_pre_hook(record, with_kwargs=True) for layer in model.model.layers]
    try:
        with torch.no_grad():
            for batch in calibration.batches:
                calls.append([])
                model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return calls


@pytest.fixture(scope="module")
def captured() -> tuple[Any, Any, Any, Any]:
    model, calibration = _model(), _calibration()
    layers = list(model.model.layers)
    cache = capture_first_layer_inputs(model, layers[0], calibration, layers=layers)
    return model, calibration, cache, _forward_calls(model, calibration)


def test_each_layer_gets_the_kwargs_of_a_plain_forward(captured) -> None:
    _model, calibration, cache, calls = captured
    assert cache.layer_variant == [0, 1, 0, 1]  # one variant per layer type, shared by the layers of that type
    for b in range(len(calibration.batches)):
        sliding, full = calls[b][0][1]["attention_mask"], calls[b][1][1]["attention_mask"]
        assert not torch.equal(sliding, full)  # the window (8) is shorter than the batch: the masks differ
        for layer in range(len(LAYER_TYPES)):
            got = cache.for_layer(layer).layer_input_kwargs[b]
            assert same_kwargs(got, calls[b][layer][1]), (b, layer)
        assert torch.equal(cache.layer_inputs[b][0], calls[b][0][0])
    shared = cache.kwargs_variants[0][0]["position_ids"], cache.kwargs_variants[1][0]["position_ids"]
    assert shared[0] is shared[1]  # a tensor common to both types is stored once


def test_replaying_the_cache_layer_by_layer_gives_the_forward_hidden_states(captured) -> None:
    model, calibration, cache, calls = captured
    current = cache
    for layer_index, layer in enumerate(model.model.layers):
        current = current.for_layer(layer_index)
        for b in range(len(calibration.batches)):
            assert torch.allclose(current.layer_inputs[b][0], calls[b][layer_index][0], atol=1e-5), (layer_index, b)
        current = replay_forward(layer, current)


def test_layer_zero_kwargs_would_have_been_wrong(captured) -> None:
    """The regression: layer 1 (full attention) replayed with layer 0's (sliding) kwargs computes otherwise."""
    model, _cal, cache, calls = captured
    layer0 = cache.for_layer(0)
    hidden = calls[0][1][0]
    with torch.no_grad():
        right = model.model.layers[1](hidden, **cache.for_layer(1).layer_input_kwargs[0])
        wrong = model.model.layers[1](hidden, **layer0.layer_input_kwargs[0])
    assert not torch.allclose(right, wrong, atol=1e-4)


def test_gemma3_with_a_short_window_quantizes_and_reloads(tmp_path, tokenizer) -> None:
    import qhf
    from qhf.corpus import bundled_docs
    from qhf.tokenizer import token_blocks

    src = save_tiny_model(tmp_path / "src", "gemma3_text", tokenizer=tokenizer, **GEMMA)
    qm = qhf.load(src, {"method": "gptq", "bits": 4, "group_size": 32})
    qm.quantize(token_blocks(qm.tokenizer, bundled_docs("calibration").texts, count=4, length=32))
    qm.save(tmp_path / "out")
    loaded = qhf.load_quantized(tmp_path / "out")
    ids = torch.randint(0, 300, (1, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(qm.model(ids).logits, loaded(ids).logits)
