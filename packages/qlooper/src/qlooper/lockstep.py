"""Lockstep forward: one pass of every calibration batch through a layer, paused before each group.

The sequential path runs one capture forward per calculation group (each re-computing the layer up to
that group) and then a replay forward: about ``1 + groups / 2`` forwards of the layer. In lockstep each
cached batch's layer call runs once, in its own greenlet (a separate stack on the caller's OS thread, so
no per-thread allocator arenas or BLAS buffers are multiplied; real threads cost ~20 MB each here):

* a forward pre-hook on every module of every group notices the first module of the batch's next group;
  it hands the module's input to ``observe(group, batch, x)`` (statistics) and parks the greenlet;
* when every batch has parked before group ``k``, ``solve(k)`` runs in the caller (solves and
  weight replacement), and the batches resume, one at a time, up to group ``k + 1``;
* after the last group the batches run to the end of the layer: their outputs are the quantized layer's
  outputs, i.e. the next layer's inputs, so no replay forward is needed.

Greenlets run one at a time, in batch order, so every statistic is accumulated in the same order, from the
same tensors, as in the sequential path: both give the same numbers. Memory: while parked, every batch holds
the activations live at its pause point (at most the widest group input plus the residual stream), instead
of one batch at a time.

A group whose modules read different inputs (``shared_input=False`` with several modules) or expert
groups cannot be paused at one point; :func:`lockstep_supported` says so and the loop keeps the
sequential path for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import greenlet
import torch
from torch import nn

from .capture import to_device
from .definition import ResolvedGroup
from .errors import ProcessorError
from .forward import layer_device, layer_output
from .input_cache import InputCache


class _Aborted(BaseException):
    """Thrown into a parked worker to unwind its forward when the run stops."""


def lockstep_supported(groups: Sequence[ResolvedGroup]) -> str | None:
    """None when every group can be paused at one point; otherwise why not (names the group)."""
    for group in groups:
        if group.spec.is_expert_group:
            return f"group {group.index} holds experts (routed tokens reach experts unevenly)"
        if len({m.input_key for m in group.modules}) > 1:
            return f"group {group.index} modules read different inputs (shared_input=False)"
        if not group.modules:
            return f"group {group.index} resolved to no module"
    return None


def parked_bytes(cache: InputCache, groups: Sequence[ResolvedGroup]) -> int:
    """Estimated bytes every batch holds while parked: per token, two residual-stream vectors (the layer
    input and the residual) plus the widest group input, in the cached hidden state's dtype."""
    widest = max((int(m.weight.shape[1]) for g in groups for m in g.modules), default=0)
    total = 0
    for args in cache.layer_inputs:
        hidden = args[0]
        width = int(hidden.shape[-1]) if hidden.ndim else 1
        tokens = hidden.numel() // max(width, 1)
        total += tokens * (2 * width + widest) * hidden.element_size()
    return total


#: the smallest automatic lockstep budget: parked activations below it never turn lockstep off
AUTO_BUDGET_FLOOR = 512 * 2**20


def tensor_bytes(module: nn.Module) -> int:
    """Bytes of ``module``'s parameters and buffers (each shared tensor once; meta tensors count their
    dtype's size, so a skeleton whose weights are not loaded is measured as it will be)."""
    seen: set[int] = set()
    total = 0
    for tensor in [*module.parameters(), *module.buffers()]:
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


def auto_budget(model: nn.Module, layers: Sequence[nn.Module]) -> int:
    """The default lockstep budget (``LoopOptions.lockstep_budget="auto"``), in bytes: the model's tensors
    outside its decoder layers (embeddings, final norm, output head) plus its largest decoder layer, and at
    least :data:`AUTO_BUDGET_FLOOR`.

    The loop already holds that much at once (the first layer's capture runs the embeddings with a dense
    layer), so parked activations within it raise the peak by at most about that amount again; past it,
    lockstep would dominate the run's memory and the layer runs the per-group forwards (same numbers, more
    forward time)."""
    in_layers = [tensor_bytes(layer) for layer in layers]
    outside = tensor_bytes(model) - sum(in_layers)
    return max(AUTO_BUDGET_FLOOR, outside + max(in_layers, default=0))


class _Worker:
    """One cached batch's forward in its own greenlet (a stack of its own on the caller's OS thread)."""

    def __init__(self, batch: int, run: Callable[[_Worker], Any]) -> None:
        self.batch = batch
        self.next_group = 0
        self.output: Any = None
        self.error: BaseException | None = None
        self.finished = False
        self._run = run
        self._caller = greenlet.getcurrent()
        self._greenlet = greenlet.greenlet(self._main, parent=self._caller)

    def _main(self) -> None:
        try:
            with torch.no_grad():
                self.output = self._run(self)
        except _Aborted:
            pass
        except Exception as exc:  # handed to the caller, which re-raises it
            self.error = exc
        finally:
            self.finished = True

    def step(self) -> None:
        """Run this batch's forward until it parks, finishes or fails."""
        if not self.finished:
            self._greenlet.switch()

    def park(self) -> None:
        """Called inside the forward: return to the caller until :meth:`step` is called again."""
        self._caller.switch()

    def stop(self) -> None:
        """Unwind a parked forward (it raises inside the hook where it parked)."""
        if self.finished:
            return
        if self._greenlet:  # started and parked
            self._greenlet.throw(_Aborted())
        self.finished = True


def lockstep_forward(
    layer: nn.Module,
    cache: InputCache,
    groups: Sequence[ResolvedGroup],
    observe: Callable[[ResolvedGroup, int, torch.Tensor], None],
    solve: Callable[[ResolvedGroup], None],
) -> InputCache:
    """Run every batch of ``cache`` through ``layer`` once, solving each group when all batches reach it.

    ``observe(group, batch, x)``: statistics from the input ``x`` ``[B, T, in]`` of ``group``'s first
    module for cached batch ``batch`` (called inside that batch's forward, batches in order);
    ``solve(group)``: called in the caller once every batch has been observed for ``group``.
    Returns the next layer's cache (outputs replace positional input 0). Raises the first error a worker
    met (after unwinding every other worker); :class:`ProcessorError` when a batch finishes its forward
    without reaching a group, or reaches groups out of the definition's order.
    """
    device = layer_device(layer)
    group_of: dict[nn.Module, int] = {}
    for position, group in enumerate(groups):
        for mod in group.modules:
            group_of[mod.module] = position
    running: dict[greenlet.greenlet, _Worker] = {}

    def pre_hook(module: nn.Module, inputs: tuple[Any, ...]) -> None:
        worker = running.get(greenlet.getcurrent())
        if worker is None:  # a forward outside the lockstep: nothing to do
            return
        position = group_of[module]
        if position < worker.next_group:  # a later module of a group this batch has passed
            return
        if position > worker.next_group:
            missed = groups[worker.next_group]
            raise ProcessorError(
                f"lockstep forward of batch {worker.batch}: reached group {groups[position].index} "
                f"({groups[position].modules[0].full_name}) before group {missed.index} "
                f"({missed.modules[0].full_name}); the groups may be listed out of forward order"
            )
        x = inputs[0]
        if not isinstance(x, torch.Tensor):
            raise ProcessorError(
                f"module {groups[position].modules[0].full_name}: expected a tensor input, found {type(x).__name__}"
            )
        observe(groups[position], worker.batch, x)
        worker.next_group += 1
        worker.park()

    def run(worker: _Worker) -> Any:
        running[greenlet.getcurrent()] = worker
        try:
            args, kwargs = to_device(cache.call_args(worker.batch), device)
            return layer(*args, **kwargs)
        finally:
            running.pop(greenlet.getcurrent(), None)

    workers = [_Worker(batch, run) for batch in range(len(cache))]
    handles = [mod.module.register_forward_pre_hook(pre_hook) for group in groups for mod in group.modules]
    try:
        for position, group in enumerate(groups):
            for worker in workers:
                worker.step()
                _check(worker, group, position)
            solve(group)
        outputs = []
        for worker in workers:
            worker.step()
            if worker.error is not None:
                raise worker.error
            if not worker.finished:
                raise ProcessorError(f"lockstep forward of batch {worker.batch}: parked after the last group")
            hidden = cache.layer_inputs[worker.batch][0]
            outputs.append(layer_output(worker.output).detach().to(hidden.device))
            worker.output = None
        return cache.with_hidden(outputs)
    finally:
        for worker in workers:
            worker.stop()
        for handle in handles:
            handle.remove()


def _check(worker: _Worker, group: ResolvedGroup, position: int) -> None:
    if worker.error is not None:
        raise worker.error
    if worker.finished or worker.next_group != position + 1:
        raise ProcessorError(
            f"module {group.modules[0].full_name}: batch {worker.batch} finished its forward without reaching "
            f"group {group.index}; the group's modules may be listed out of forward order or never called"
        )
