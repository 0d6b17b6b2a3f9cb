"""``LoopOptions.layer_loader``: each processed layer is loaded once before the loop touches it and released
once after it is finished (finalizers included), in layer order; a failing loader stops the loop naming the layer."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from qalgos.spec import QuantSpec
from qlooper import LayerLoadError, LoopOptions, quantize_model
from torch import nn
from toy_models import DENSE, ToyDecoder, toy_calibration

SPEC = QuantSpec(bits=4, group_size=32)


class StashLoader:
    """Holds every layer's weights aside (the layers hold zeros meanwhile) and puts them back on ``load``."""

    def __init__(self, model: ToyDecoder, events: list[tuple[str, int]]) -> None:
        self.model = model
        self.events = events
        self.stash: dict[int, dict[str, torch.Tensor]] = {}
        self.names: list[tuple[str, str]] = []
        for index, layer in enumerate(model.model.layers):
            self.stash[index] = {n: p.detach().clone() for n, p in layer.named_parameters()}
            with torch.no_grad():
                for p in layer.parameters():
                    p.zero_()

    def load(self, index: int, name: str, layer: nn.Module) -> None:
        if layer is not self.model.model.layers[index]:
            raise AssertionError(f"load({index}) got another module than layer {index}")
        self.events.append(("load", index))
        self.names.append(("load", name))
        with torch.no_grad():
            for n, p in layer.named_parameters():
                p.copy_(self.stash[index][n])

    def release(self, index: int, name: str, layer: nn.Module) -> None:
        if layer is not self.model.model.layers[index]:
            raise AssertionError(f"release({index}) got another module than layer {index}")
        self.events.append(("release", index))
        self.names.append(("release", name))


def _record_forwards(model: ToyDecoder, events: list[tuple[str, int]]) -> None:
    """A ``("forward", layer)`` event per call of a layer's first linear (the first-layer capture calls the
    layers' recording stand-ins only, which run no linear)."""
    for index, layer in enumerate(model.model.layers):
        layer.self_attn.q_proj.register_forward_pre_hook(lambda *_a, i=index: events.append(("forward", i)))


def test_loader_loads_before_and_releases_after_each_layer_in_order() -> None:
    events: list[tuple[str, int]] = []
    model = ToyDecoder()
    loader = StashLoader(model, events)
    _record_forwards(model, events)

    def replace(name: str, _dense: nn.Module, _done: object) -> None:
        events.append(("finalized", int(name.split(".")[2])))
        return None

    options = LoopOptions(layer_loader=loader, replace_module=replace)
    run = quantize_model(model, DENSE, toy_calibration(), SPEC, "gptq", options=options)
    layers = range(len(model.model.layers))
    assert [i for kind, i in events if kind == "load"] == list(layers)
    assert [i for kind, i in events if kind == "release"] == list(layers)
    for kind in ("load", "release"):
        assert [n for k, n in loader.names if k == kind] == [f"model.layers.{i}" for i in layers]
    for index in layers:
        load, release = events.index(("load", index)), events.index(("release", index))
        touched = [at for at, event in enumerate(events) if event[1] == index and event[0] != "load"]
        assert [kind for kind, i in events if i == index and kind == "finalized"]  # the layer was finalized
        assert all(load < at for at in touched)  # no forward or finalizer before the layer was loaded
        assert all(at <= release for at in touched)  # released after every forward and finalizer of the layer
        if index > 0:
            assert events.index(("load", index - 1)) < load
    # the weights the loader put back are the ones quantized: same packed tensors as a run without a loader
    plain = quantize_model(ToyDecoder(), DENSE, toy_calibration(), SPEC, "gptq")
    assert set(run.modules) == set(plain.modules)
    for name, done in run.modules.items():
        for key, value in done.tensors().items():
            assert np.array_equal(value, plain.modules[name].tensors()[key]), (name, key)


class FailingLoader:
    def __init__(self, fail: str, at: int) -> None:
        self.fail, self.at = fail, at
        self.loaded: list[int] = []

    def load(self, index: int, name: str, layer: nn.Module) -> None:
        if self.fail == "load" and index == self.at:
            raise OSError(f"cannot read the weights of {name}")
        self.loaded.append(index)

    def release(self, index: int, name: str, layer: nn.Module) -> None:
        if self.fail == "release" and index == self.at:
            raise OSError("disk gone")


def test_failing_load_stops_the_loop_naming_the_layer() -> None:
    events: list[tuple[str, int]] = []
    model = ToyDecoder()
    _record_forwards(model, events)
    loader = FailingLoader("load", 2)
    with pytest.raises(LayerLoadError, match=r"layer model\.layers\.2 \(index 2\).*load failed.*OSError") as info:
        quantize_model(model, DENSE, toy_calibration(), SPEC, "gptq", options=LoopOptions(layer_loader=loader))
    assert isinstance(info.value.__cause__, OSError)
    assert loader.loaded == [0, 1]
    assert not [i for kind, i in events if kind == "forward" and i >= 2]  # layer 2 never ran


def test_failing_release_stops_the_loop_naming_the_layer() -> None:
    loader = FailingLoader("release", 1)
    with pytest.raises(LayerLoadError, match=r"layer model\.layers\.1 \(index 1\).*release failed.*disk gone"):
        quantize_model(ToyDecoder(), DENSE, None, SPEC, "rtn", options=LoopOptions(layer_loader=loader))
