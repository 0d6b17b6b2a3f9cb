"""First-layer capture never records KV-cache kwargs, and turns the model's cache off while capturing."""

from types import SimpleNamespace
from typing import Any

import torch
from qlooper.capture import CACHE_KWARGS, capture_first_layer_inputs
from torch import nn
from toy_models import VOCAB, toy_calibration


class GrowingCache:
    """A stand-in KV cache: every layer call appends to it (as an HF ``DynamicCache`` would)."""

    def __init__(self) -> None:
        self.entries: list[torch.Tensor] = []


class CacheRecordingLayer(nn.Module):
    """Records, per call, whether it was handed a cache object or ``use_cache=True``."""

    def __init__(self) -> None:
        super().__init__()
        self.received_cache: list[bool] = []

    def forward(self, hidden: torch.Tensor, **kwargs: Any) -> tuple[torch.Tensor]:
        cache = kwargs.get("past_key_values") or kwargs.get("past_key_value")
        self.received_cache.append(cache is not None or bool(kwargs.get("use_cache")))
        if cache is not None:
            cache.entries.append(hidden)
        return (hidden + 1,)


class CachingModel(nn.Module):
    """Builds a cache and passes it to its layer unless ``config.use_cache`` is off."""

    def __init__(self) -> None:
        super().__init__()
        self.config = SimpleNamespace(use_cache=True)
        self.embed = nn.Embedding(VOCAB, 8)
        self.layer = CacheRecordingLayer()
        self.caches_built = 0

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        kw: dict[str, Any] = {"attention_mask": attention_mask}
        if self.config.use_cache:
            self.caches_built += 1
            kw["past_key_values"] = GrowingCache()
        kw["use_cache"] = self.config.use_cache
        kw["past_key_value"] = kw.get("past_key_values")
        return self.layer(self.embed(input_ids), **kw)[0]


def test_capture_turns_the_cache_off_and_restores_the_setting() -> None:
    model = CachingModel()
    cache = capture_first_layer_inputs(model, model.layer, toy_calibration(n=4, batch_size=2))
    assert model.caches_built == 0
    assert model.config.use_cache is True
    for kw in cache.layer_input_kwargs:
        assert not CACHE_KWARGS & kw.keys()
        assert "attention_mask" in kw


def test_replaying_captured_kwargs_never_hands_the_layer_a_cache() -> None:
    model = CachingModel()
    model.config = SimpleNamespace()  # no use_cache switch: the model builds a cache regardless

    def forward_always_caching(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        kw = {"attention_mask": attention_mask, "past_key_values": GrowingCache(), "use_cache": True}
        return model.layer(model.embed(input_ids), **kw)[0]

    model.forward = forward_always_caching  # type: ignore[method-assign]
    cache = capture_first_layer_inputs(model, model.layer, toy_calibration(n=4, batch_size=2))
    assert model.layer.received_cache == []  # the pre-hook stopped the forward before the layer ran
    for args, kw in zip(cache.layer_inputs, cache.layer_input_kwargs, strict=True):
        assert not CACHE_KWARGS & kw.keys()
        for _ in range(3):  # replay as the loop does, once per step
            model.layer(*args, **kw)
    assert model.layer.received_cache and not any(model.layer.received_cache)
