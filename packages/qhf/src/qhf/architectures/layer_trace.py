"""What one decoder layer did during a forward: module calls, who produced each tensor, who consumed it.

:func:`trace_layer` installs, on every submodule of a layer, a forward pre-hook (inputs) and a forward
hook (output), and a torch function mode that records every op taking a tensor. Tensors are identified by
object identity (``id``) and kept alive in the trace so an id is never reused while it is read.
Only the first call of the layer is recorded (one layer instance may serve several positions).

Every ``nn.Linear`` of the layer is watched for reads of its ``weight`` from outside its own call (DeepSeek-V3.2's
indexer reads ``weights_proj.weight.dtype``): a quantized module has no float ``weight``, so such a linear must
stay dense (``LayerTrace.weight_read_outside``). The watch swaps the module's class for a subclass for the
duration of the trace and restores it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

# Ops that read only a tensor's metadata (or alias it without reading values) are not consumers.
_METADATA_OPS = frozenset(
    {"size", "dim", "shape", "dtype", "device", "is_floating_point", "numel", "__get__", "stride", "is_contiguous"}
)


@dataclass
class ModuleCall:
    """One call of a submodule: its dotted name (relative to the layer), call order, the ids of the tensors
    passed to it (positional ``args`` first), and the id of the tensor it returned (first of a tuple)."""

    name: str
    order: int
    inputs: tuple[int, ...]
    first_input: int | None
    output: int | None = None
    start: int = -1  # the trace's op counter when the call began
    end: int = -1  # ... and when it returned


@dataclass
class LayerTrace:
    """``calls``: every submodule call in start order. ``producers``: tensor id -> innermost module whose
    call returned it. ``consumers``: tensor id -> ``(op name, op counter)`` of the torch ops that read it
    (metadata reads excluded). ``widths``: tensor id -> last dimension."""

    calls: list[ModuleCall] = field(default_factory=list)
    producers: dict[int, str] = field(default_factory=dict)
    consumers: dict[int, list[tuple[str, int]]] = field(default_factory=dict)
    ops: int = 0
    widths: dict[int, int] = field(default_factory=dict)
    alive: list[torch.Tensor] = field(default_factory=list)
    weight_read_outside: set[str] = field(default_factory=set)

    def calls_of(self, name: str) -> list[ModuleCall]:
        return [call for call in self.calls if call.name == name]

    def called(self) -> set[str]:
        return {call.name for call in self.calls}

    def keep(self, tensor: torch.Tensor) -> int:
        self.alive.append(tensor)
        self.widths[id(tensor)] = int(tensor.shape[-1]) if tensor.dim() else 0
        return id(tensor)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _first_tensor(value: Any) -> torch.Tensor | None:
    return next(_tensors(value), None)


def _enter(mode: TorchFunctionMode) -> None:
    """Switch ``mode`` on outside a ``with`` block (torch declares ``__enter__`` without annotations)."""
    cast("Callable[[], object]", mode.__enter__)()


def _exit(mode: TorchFunctionMode) -> None:
    """Switch ``mode`` off again (torch declares ``__exit__`` without annotations)."""
    cast("Callable[[object, object, object], object]", mode.__exit__)(None, None, None)


class _ConsumerMode(TorchFunctionMode):
    """Records, per tensor id, the ops (other than metadata reads) that take it as an argument."""

    def __init__(self, trace: LayerTrace) -> None:
        super().__init__()
        self.trace = trace

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", str(func))
        if name not in _METADATA_OPS:
            self.trace.ops += 1
            for tensor in _tensors((args, kwargs)):
                self.trace.consumers.setdefault(id(tensor), []).append((name, self.trace.ops))
        return func(*args, **kwargs)


@contextmanager
def trace_layer(layer: nn.Module) -> Iterator[LayerTrace]:
    """Record the first call of ``layer`` (see the module docstring) while the context is active."""
    trace = LayerTrace()
    state = {"active": False, "done": False, "order": 0}
    mode = _ConsumerMode(trace)
    handles = []
    open_calls: dict[str, list[ModuleCall]] = {}

    def layer_pre(_m: nn.Module, _args: Any, _kwargs: Any) -> None:
        if not state["done"]:
            state["active"] = True
            _enter(mode)

    def layer_post(_m: nn.Module, _args: Any, _kwargs: Any, _out: Any) -> None:
        if state["active"]:
            _exit(mode)
            state["active"], state["done"] = False, True

    def pre(name: str) -> Any:
        def hook(_m: nn.Module, args: Any, kwargs: Any) -> None:
            if not state["active"]:
                return
            ids = tuple(trace.keep(t) for t in _tensors((args, kwargs)))
            first = _first_tensor(args)
            call = ModuleCall(name, state["order"], ids, id(first) if first is not None else None, start=trace.ops)
            state["order"] += 1
            trace.calls.append(call)
            open_calls.setdefault(name, []).append(call)

        return hook

    def post(name: str) -> Any:
        def hook(_m: nn.Module, _args: Any, _kwargs: Any, out: Any) -> None:
            if not state["active"] or not open_calls.get(name):
                return
            call = open_calls[name].pop()
            call.end = trace.ops
            tensor = _first_tensor(out)
            if tensor is not None:
                call.output = trace.keep(tensor)
                trace.producers.setdefault(id(tensor), name)  # innermost first: hooks of children fire first

        return hook

    def weight_read(name: str) -> None:
        if state["active"] and not open_calls.get(name):
            trace.weight_read_outside.add(name)

    watched = _watch_linear_weights(layer, weight_read)
    handles.append(layer.register_forward_pre_hook(layer_pre, with_kwargs=True))
    for name, module in layer.named_modules():
        if name:
            handles.append(module.register_forward_pre_hook(pre(name), with_kwargs=True))
            handles.append(module.register_forward_hook(post(name), with_kwargs=True))
    handles.append(layer.register_forward_hook(layer_post, with_kwargs=True))
    try:
        yield trace
    finally:
        if state["active"]:
            _exit(mode)
        for handle in handles:
            handle.remove()
        for module, original in watched:
            module.__class__ = original
            del module.__dict__["_weight_watch"]


_WATCHING: dict[type, type] = {}


def _watch_linear_weights(layer: nn.Module, on_read: Any) -> list[tuple[nn.Module, type]]:
    """Swap each ``nn.Linear`` submodule's class for a subclass that calls ``on_read(name)`` when its ``weight``
    is read; returns ``(module, original class)`` pairs to restore."""
    swapped: list[tuple[nn.Module, type]] = []
    for name, module in layer.named_modules():
        if not name or not isinstance(module, nn.Linear):
            continue
        original = type(module)
        if original not in _WATCHING:
            _WATCHING[original] = type(original.__name__, (original,), {"__getattr__": _watching_getattr})
        module.__dict__["_weight_watch"] = (name, on_read, original)
        module.__class__ = _WATCHING[original]
        swapped.append((module, original))
    return swapped


def _watching_getattr(self: nn.Module, attr: str) -> Any:
    if attr == "weight":
        watch = self.__dict__.get("_weight_watch")
        if watch is not None:
            watch[1](watch[0])
            return watch[2].__getattr__(self, attr)
    return nn.Module.__getattr__(self, attr)
