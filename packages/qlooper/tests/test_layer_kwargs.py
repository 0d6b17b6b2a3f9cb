"""Per-layer call kwargs: every layer's kwargs are recorded in the first capture, shared per variant, selected
with ``InputCache.for_layer`` and kept through the continuation codec (resume)."""

from typing import Any

import torch
from qcheckpoint.continuation import decode_continuation, encode_continuation
from qlooper.capture import capture_first_layer_inputs
from qlooper.input_cache import InputCache
from toy_models import ToyDecoder, toy_calibration


class TwoMaskDecoder(ToyDecoder):
    """Even layers get a sliding-window mask (window 2), odd layers the full causal mask (one object each)."""

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.model.embed_tokens(input_ids)
        t = input_ids.shape[1]
        full = torch.ones(t, t, dtype=torch.bool).tril()[None, None]
        sliding = full & ~torch.ones(t, t, dtype=torch.bool).tril(-2)[None, None]
        for index, layer in enumerate(self.model.layers):
            h = layer(h, attention_mask=sliding if index % 2 == 0 else full)[0]
        return self.lm_head(self.model.norm(h))


def _capture() -> tuple[Any, InputCache]:
    model = TwoMaskDecoder()
    layers = list(model.model.layers)
    return model, capture_first_layer_inputs(model, layers[0], toy_calibration(n=4, batch_size=2), layers=layers)


def test_every_layer_gets_its_own_mask_stored_once_per_variant() -> None:
    _, cache = _capture()
    assert cache.layer_variant == [0, 1, 0, 1]
    for b in range(len(cache)):
        t = cache.layer_inputs[b][0].shape[1]
        sliding, full = (cache.for_layer(i).layer_input_kwargs[b]["attention_mask"] for i in (0, 1))
        assert torch.equal(full, torch.ones(t, t, dtype=torch.bool).tril()[None, None])
        assert not torch.equal(sliding, full)
        assert cache.for_layer(2).layer_input_kwargs[b]["attention_mask"] is sliding


def test_a_model_with_one_kwargs_set_stores_no_variants() -> None:
    model = ToyDecoder()
    layers = list(model.model.layers)
    cache = capture_first_layer_inputs(model, layers[0], toy_calibration(n=4, batch_size=2), layers=layers)
    assert cache.layer_variant == [] and cache.kwargs_variants == []
    assert cache.for_layer(3) is cache


def test_variants_survive_the_continuation_codec_and_the_next_layer() -> None:
    _, cache = _capture()
    hidden = [torch.zeros_like(args[0]) for args in cache.layer_inputs]
    restored = InputCache.from_state(decode_continuation(encode_continuation(cache.with_hidden(hidden).to_state())))
    assert restored.layer_variant == cache.layer_variant
    for layer in range(4):
        for b in range(len(cache)):
            want = cache.for_layer(layer).layer_input_kwargs[b]["attention_mask"]
            assert torch.equal(restored.for_layer(layer).layer_input_kwargs[b]["attention_mask"], want)


def test_stand_ins_return_the_tuple_the_model_unpacks() -> None:
    from qlooper.layer_kwargs import LayerCallRecorder

    layers = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]
    x = torch.randn(1, 3, 4)
    with LayerCallRecorder(layers, lambda _k: True, output_arity=3):
        hidden, second, third = layers[0](x)
    assert hidden is x and second is None and third is None
    with LayerCallRecorder(layers, lambda _k: True):
        assert layers[0](x) is x


def test_a_layer_run_twice_in_one_forward_is_refused_by_name() -> None:
    import pytest
    from qlooper.errors import CaptureError
    from qlooper.layer_kwargs import LayerCallRecorder

    layers = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]
    x = torch.randn(1, 3, 4)
    with LayerCallRecorder(layers, lambda _k: True):
        layers[0](x)
        layers[1](x)
        with pytest.raises(CaptureError, match="decoder layer 1 ran twice in one forward"):
            layers[1](x)  # a looped model applying its recurrent layer again
