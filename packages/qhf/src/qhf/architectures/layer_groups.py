"""Calculation groups of one decoder layer, derived from a :class:`~qhf.architectures.layer_trace.LayerTrace`.

* quantized: every ``nn.Linear`` of the layer that ran, except routers (output width 1 or the number of
  experts) and subclasses whose own forward does not return ``F.linear(x, weight, bias)`` on the recorded
  input (Llama 4's router returns scores and logits; a quantized linear would return one tensor), which stay
  dense; experts (numbered children of a container)
  are named with ``#``; a linear that never ran stays dense with the reason recorded (``left_dense``: the
  block that never ran, e.g. an encoder-decoder's cross-attention ``encoder_attn`` in a decoder-only forward);
* groups: linears reading the same input tensor (object identity), in execution order; experts are grouped
  the same way inside one expert;
* ``prev_op``: the module that returned the group's input, when it is a norm that scales each channel by
  ``offset + weight`` (probed on the recorded input) or a linear of the same width, *and* nothing but the
  group's linears reads that tensor (otherwise folding AWQ scales into it would change other consumers);
* ``inspect``: the nearest enclosing module called with the group's input (``self_attn`` for q/k/v).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import UnsupportedArchitectureError
from .layer_trace import LayerTrace


@dataclass(frozen=True)
class FoundGroup:
    """One group: module names relative to the layer (``#`` for the expert index), its previous op and the
    norm offset found for it, the module AWQ inspects."""

    modules: tuple[str, ...]
    prev_op: str | None
    inspect: str | None
    offset: float = 0.0
    experts: bool = False


@dataclass
class LayerStructure:
    """What one layer structure holds: groups in execution order, modules that run unquantized, linears left
    dense with the reason, and why a group has no previous op."""

    groups: list[FoundGroup]
    run_only: list[str]
    left_dense: dict[str, str] = field(default_factory=dict)
    no_prev: dict[str, str] = field(default_factory=dict)


def expert_containers(layer: nn.Module) -> dict[str, int]:
    """Dotted name -> expert count of every container whose children are all numbered, alike and hold linears."""
    found: dict[str, int] = {}
    for name, module in layer.named_modules():
        children = list(module.named_children())
        if len(children) < 2 or not all(child.isdigit() for child, _ in children):
            continue
        kinds = {tuple((n, type(m).__name__) for n, m in child.named_modules()) for _, child in children}
        if len(kinds) == 1 and any(isinstance(m, nn.Linear) for m in children[0][1].modules()):
            found[name] = len(children)
    return found


def _wildcard(name: str, containers: dict[str, int]) -> tuple[str, int | None]:
    for container in containers:
        prefix = f"{container}." if container else ""
        if name.startswith(prefix):
            index, _, rest = name[len(prefix) :].partition(".")
            if index.isdigit():
                return f"{prefix}#.{rest}", int(index)
    return name, None


def probe_norm_offset(module: nn.Module, x: torch.Tensor) -> float | None:
    """``c`` when ``module(x)`` equals ``f(x) * (c + weight)`` per channel with ``c`` 0 or 1, else None.

    The weight is set to zeros, ones and random values (bias zeroed) and restored afterwards. A norm whose weight
    is narrower than float32 is probed as a float32 copy on ``x`` in float32: in bfloat16 the product
    ``f(x) * weight`` keeps 8 significant bits (relative error up to 2**-8), more than the tolerance, and every
    bfloat16 model's norms failed the probe (AWQ then left their groups unscaled).
    """
    weight = module._parameters.get("weight")
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        return None
    if weight.dtype in (torch.float16, torch.bfloat16):
        module, x = copy.deepcopy(module).float(), x.float()
        copied = module._parameters.get("weight")
        if not isinstance(copied, torch.Tensor):
            return None
        weight = copied
    bias = module._parameters.get("bias")
    saved = (weight.detach().clone(), bias.detach().clone() if isinstance(bias, torch.Tensor) else None)
    generator = torch.Generator().manual_seed(0)
    trial = torch.rand(weight.shape, generator=generator, dtype=torch.float32).to(weight.dtype) + 0.5
    outputs = []
    try:
        with torch.no_grad():
            if isinstance(bias, torch.Tensor):
                bias.zero_()
            for value in (torch.zeros_like(weight), torch.ones_like(weight), trial):
                weight.copy_(value)
                out = module(x)
                outputs.append((out[0] if isinstance(out, tuple) else out).to(torch.float32))
    finally:
        with torch.no_grad():
            weight.copy_(saved[0])
            if isinstance(bias, torch.Tensor) and saved[1] is not None:
                bias.copy_(saved[1])
    at_zero, at_one, at_trial = outputs
    unit = at_one - at_zero
    for offset in (0.0, 1.0):
        if torch.allclose(at_zero, offset * unit, atol=1e-4, rtol=1e-3) and torch.allclose(
            at_trial, unit * (offset + trial.to(torch.float32)), atol=1e-4, rtol=1e-3
        ):
            return offset
    return None


class _Finder:
    def __init__(self, layer: nn.Module, trace: LayerTrace, where: str) -> None:
        self.layer = layer
        self.trace = trace
        self.where = where
        self.modules = dict(layer.named_modules())
        self.tensors = {id(t): t for t in trace.alive}
        self.containers = expert_containers(layer)

    def _is_router(self, module: nn.Linear) -> bool:
        return module.out_features == 1 or module.out_features in set(self.containers.values())

    def _computes_linear(self, name: str, module: nn.Linear) -> bool:
        """Whether ``module`` returns ``F.linear(x, weight, bias)`` on its recorded input (always, for
        ``nn.Linear`` itself; a subclass such as Falcon's ``FalconLinear`` may compute it its own way)."""
        if type(module).forward is nn.Linear.forward:
            return True
        first = self.trace.calls_of(name)[0].first_input
        x = self.tensors.get(first) if first is not None else None
        if x is None:
            return False
        with torch.no_grad():
            out = module(x)
            expected = torch.nn.functional.linear(x, module.weight, module.bias)
        return isinstance(out, torch.Tensor) and out.shape == expected.shape and torch.allclose(out, expected)

    def linear_inputs(self, left: dict[str, str]) -> dict[str, tuple[int, ...]]:
        """Quantized linear name -> ids of the tensors it read, one per call."""
        inputs: dict[str, tuple[int, ...]] = {}
        called = self.trace.called()
        for name, module in self.modules.items():
            if not isinstance(module, nn.Linear):
                continue
            if name in called and not self._computes_linear(name, module):  # Llama 4's router: (scores, logits)
                left[name] = (
                    f"{type(module).__name__} overrides nn.Linear.forward with something other than "
                    "F.linear(x, weight, bias): kept dense"
                )
            elif name in self.trace.weight_read_outside:
                left[name] = "the model reads its weight outside its own call (e.g. its dtype): kept dense"
            elif self._is_router(module):
                left[name] = f"router-like output width {module.out_features}: kept dense"
            elif name in called:
                calls = self.trace.calls_of(name)
                inputs[name] = tuple(c.first_input for c in calls if c.first_input is not None)
            elif _wildcard(name, self.containers)[1] is None:
                left[name] = self._not_run_reason(name, called)
        return inputs

    def _not_run_reason(self, name: str, called: set[str]) -> str:
        """Why linear ``name`` (never called) stays dense: the outermost enclosing block of the layer that never
        ran either (an encoder-decoder's ``encoder_attn``: cross-attention runs only with encoder states, which a
        decoder-only forward never gives), else the linear itself."""
        parts = name.split(".")
        block = next((".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) not in called), None)
        if block is None:
            return "did not run during discovery: kept dense"
        return (
            f"its block {block!r} never ran in the decoder-only discovery forward (e.g. cross-attention, which runs "
            "only with encoder states): kept dense, not quantized from zero calibration rows"
        )

    def prev_op(self, members: list[str], tensor_id: int) -> tuple[str | None, float, str]:
        producer = self.trace.producers.get(tensor_id)
        if producer is None:
            return None, 0.0, "the input is not a module's output"
        produced = self.trace.calls_of(producer)[0].end  # reads inside the producer's own forward do not count
        windows = [(c.start, c.end) for m in members for c in self.trace.calls_of(m)]
        others = [
            op
            for op, tick in self.trace.consumers.get(tensor_id, [])
            if tick > produced and not any(start < tick <= end for start, end in windows)
        ]
        if others:
            return None, 0.0, f"{producer}'s output is also read by {sorted(set(others))} outside the group"
        module = self.modules[producer]
        width = self.trace.widths.get(tensor_id, -1)
        if isinstance(module, nn.Linear):
            return (producer, 0.0, "") if module.out_features == width else (None, 0.0, "width differs")
        call = self.trace.calls_of(producer)[0]
        x = self.tensors.get(call.first_input) if call.first_input is not None else None
        if x is None:
            return None, 0.0, f"{producer} has no tensor input"
        offset = probe_norm_offset(module, x)
        if offset is None:
            return None, 0.0, f"{producer} does not scale channels by (offset + weight)"
        return producer, offset, ""

    def inspect(self, members: list[str], tensor_id: int) -> str | None:
        parts = [m.split(".") for m in members]
        common: list[str] = []
        for items in zip(*parts, strict=False):
            if len(set(items)) != 1 or "#" in items:
                break
            common.append(items[0])
        while common:
            name = ".".join(common)
            if name not in members and any(tensor_id in c.inputs for c in self.trace.calls_of(name)):
                return name
            common.pop()
        return None


def _partition(names: list[str], inputs: dict[str, tuple[int, ...]], order: dict[str, int]) -> list[list[str]]:
    by_key: dict[tuple[int, ...], list[str]] = {}
    for name in sorted(names, key=lambda n: order[n]):
        by_key.setdefault(inputs[name], []).append(name)
    return sorted(by_key.values(), key=lambda g: order[g[0]])


def layer_structure(layer: nn.Module, trace: LayerTrace, where: str) -> LayerStructure:
    """Groups, previous ops and unquantized modules of ``layer`` from its ``trace`` (module docstring)."""
    finder = _Finder(layer, trace, where)
    left: dict[str, str] = {}
    inputs = finder.linear_inputs(left)
    order = {call.name: call.order for call in reversed(trace.calls)}
    dense = [n for n in inputs if _wildcard(n, finder.containers)[1] is None]
    found: list[tuple[int, FoundGroup]] = []
    no_prev: dict[str, str] = {}
    for members in _partition(dense, inputs, order):
        key = inputs[members[0]]
        prev, offset, why = finder.prev_op(members, key[0]) if len(key) == 1 else (None, 0.0, "called repeatedly")
        if prev is None:
            no_prev[members[0]] = why
        group = FoundGroup(tuple(members), prev, finder.inspect(members, key[0]) if len(key) == 1 else None, offset)
        found.append((order[members[0]], group))
    found += _expert_groups(finder, inputs, order)
    if not found:
        two_d = [
            f"{n} ({type(m).__name__})"
            for n, m in finder.modules.items()
            if not isinstance(m, nn.Linear)
            and isinstance(getattr(m, "weight", None), torch.Tensor)
            and m.weight.dim() == 2
        ]
        raise UnsupportedArchitectureError(
            f"{where}: no nn.Linear ran in the layer, nothing to quantize"
            + (f"; modules with 2-D weights that are not nn.Linear: {', '.join(two_d)}" if two_d else "")
        )
    quantized = {m.replace("#", "0") for _, g in found for m in g.modules}
    run_only = [
        n
        for n in sorted(trace.called(), key=lambda n: order[n])
        if n not in quantized
        and n in finder.modules
        and finder.modules[n]._parameters
        and _wildcard(n, finder.containers)[1] is None
    ]
    return LayerStructure([g for _, g in sorted(found, key=lambda item: item[0])], run_only, left, no_prev)


def _expert_groups(
    finder: _Finder, inputs: dict[str, tuple[int, ...]], order: dict[str, int]
) -> list[tuple[int, FoundGroup]]:
    """Groups of expert linears: the partition of the first expert that ran, checked on every other one."""
    per_expert: dict[tuple[str, int], list[str]] = {}
    for name in inputs:
        wild, expert = _wildcard(name, finder.containers)
        if expert is not None:
            container = wild.split(".#.")[0]
            per_expert.setdefault((container, expert), []).append(name)
    result: list[tuple[int, FoundGroup]] = []
    shapes: dict[str, list[tuple[str, ...]]] = {}
    for (container, _expert), names in sorted(per_expert.items(), key=lambda kv: order[kv[1][0]]):
        groups = [tuple(_wildcard(n, finder.containers)[0] for n in g) for g in _partition(names, inputs, order)]
        if container in shapes:
            if groups != shapes[container]:
                raise UnsupportedArchitectureError(
                    f"{finder.where}: experts of {container!r} do not all group their linears alike "
                    f"({shapes[container]} vs {groups})"
                )
            continue
        shapes[container] = groups
        concrete = _partition(names, inputs, order)
        result += [
            (order[c[0]], FoundGroup(g, None, None, experts=True)) for c, g in zip(concrete, groups, strict=True)
        ]
    return result
