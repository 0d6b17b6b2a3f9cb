"""One shard worker: runs a copy of the current decoder layer on its contiguous share of the cached batches.

A worker is plain Python (no Ray import): :class:`qlooper.executor.LocalShardExecutor` keeps its workers in
this process, :class:`qlooper.ray_executor.RayExecutor` wraps each in a Ray actor. The driver sends the
layer once per layer (:meth:`LayerWorker.set_layer`) and, with every forward call, the parameters and
buffers its solves changed since the previous call (``changed``: a subset of the layer's state dict; empty
when nothing changed). A replacement for a lost worker gets the layer and then the driver's whole current
state (:meth:`LayerWorker.update`) before it repeats the call, so it holds what the lost worker held.

Recordings: for every module the driver hooked, :meth:`LayerWorker.capture` records, per batch and in call
order, ``(module name relative to the layer, "pre" | "post", args, kwargs)``: ``"pre"`` when the module is
called (its forward pre-hooks' view), ``"post"`` when it returns (its forward hooks' view, output not
kept). Positional tensors are cloned at the time of the call, so a later in-place op cannot change them.
Modules the driver planned (:mod:`qlooper.worker_statistics`) are not recorded: the worker counts their
token rows and, for a GPTQ input, returns head rows, whole-segment Hessian sums and tail rows instead; a
tail that starts a segment straddling shards it keeps, and forms that segment's sum when the driver brings
the other shards' rows of it (:meth:`LayerWorker.straddle`). Under the chained reduce (``RowPlan.hold``) the
worker keeps the segment sums it formed and adds them, in segment order, to the running sum the previous worker
passes on (:meth:`LayerWorker.chain`), one Gram block at a time.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from qalgos.hessian import LowerGram
from torch import nn

from .errors import SegmentsLost, StopForward
from .forward import layer_output
from .worker_statistics import RowCollector, RowPlan, ShardRows

Call = tuple[list[Any], dict[str, Any]]
"""The positional and keyword arguments of one cached batch's layer call."""

Event = tuple[str, str, tuple[Any, ...], dict[str, Any]]
"""One hooked module call seen by a worker: (relative name, "pre" | "post", args, kwargs)."""


@dataclass(frozen=True)
class HookedModule:
    """A module of the layer whose calls the driver wants recorded (``pre``/``post``: which hook kinds)."""

    name: str
    pre: bool
    post: bool


def _snapshot(args: tuple[Any, ...], memo: dict[int, tuple[torch.Tensor, torch.Tensor]]) -> tuple[Any, ...]:
    """``args`` with tensors cloned; a tensor several hooked modules read (q/k/v's input) is cloned once per
    batch, so the recording (and its pickle) holds it once. The memo keeps each original alive for the batch
    (``id -> (original, clone)``): a freed temporary's id can be reused by the next one (one routed expert
    input after another), which must not be taken for the same tensor."""
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            if id(a) not in memo:
                memo[id(a)] = (a, a.detach().clone())
            a = memo[id(a)][1]
        out.append(a)
    return tuple(out)


def _stop(_module: nn.Module, _inputs: tuple[Any, ...], _out: Any) -> None:
    raise StopForward("shard capture stops here")


class ChainPart(NamedTuple):
    """A part of a running sum passed along the chained reduce: ``blocks``, float64 Gram blocks, and
    ``seconds``: the adding seconds of every worker so far."""

    blocks: list[torch.Tensor]
    seconds: float


class LayerWorker:
    """Holds one layer copy; runs capture forwards, replay forwards and solve jobs (see the module docstring)."""

    def __init__(self, name: str, threads: int | None = None) -> None:
        if threads is not None:  # the driver's count: a reduction's split over threads changes its float sum
            torch.set_num_threads(threads)
        self.name = name
        self.layer: nn.Module | None = None
        self.layer_key: str | None = None
        self.kept: dict[str, tuple[torch.Tensor, Callable[[torch.Tensor], Any]]] = {}  # straddling tails
        self.sums: dict[str, list[LowerGram]] = {}  # segment sums held for the chained reduce, in segment order

    def identity(self) -> dict[str, Any]:
        """Who this worker is: ``name``, ``host``, ``pid``, torch ``threads`` (reports name a lost worker)."""
        return {"name": self.name, "host": socket.gethostname(), "pid": os.getpid(), "threads": torch.get_num_threads()}

    def set_layer(self, key: str, layer: nn.Module) -> str:
        """Keep ``layer`` (a copy of the driver's, in eval mode) for the calls of layer ``key``."""
        layer.eval()
        self.layer, self.layer_key = layer, key
        self.kept, self.sums = {}, {}
        return self.name

    def update(self, key: str, changed: dict[str, torch.Tensor]) -> str:
        """Copy ``changed`` (state-dict entries of layer ``key``) into the held layer; returns the name."""
        self._loaded(key, changed)
        return self.name

    def _loaded(self, key: str, changed: dict[str, torch.Tensor]) -> nn.Module:
        if self.layer is None or self.layer_key != key:
            raise RuntimeError(f"worker {self.name}: holds layer {self.layer_key!r}, a call came for {key!r}")
        if not changed:
            return self.layer
        with torch.no_grad():
            result = self.layer.load_state_dict(changed, strict=False)
        if result.unexpected_keys:
            raise RuntimeError(
                f"worker {self.name}: layer {key!r} has no state entries {sorted(result.unexpected_keys)}"
            )
        return self.layer

    def capture(
        self,
        key: str,
        changed: dict[str, torch.Tensor],
        calls: Sequence[Call],
        hooked: Sequence[HookedModule],
        stop_after: str | None,
        rows: dict[str, RowPlan] | None = None,
        masks: Sequence[torch.Tensor] = (),
    ) -> tuple[tuple[list[list[Event]], dict[str, ShardRows]], float]:
        """Apply ``changed`` (see :meth:`update`), run ``calls`` (this shard's batches, in order; may be
        empty), recording the ``hooked`` modules' calls; each forward ends after module ``stop_after``
        returns when given. The modules in ``rows`` are not recorded: their inputs are counted and turned into
        statistics here (:mod:`qlooper.worker_statistics`; ``masks``: the batches' token masks ``[B, T]``).
        Returns ((events per batch, :class:`ShardRows` per planned module), seconds)."""
        start = time.perf_counter()
        layer = self._loaded(key, changed)
        modules = dict(layer.named_modules())
        events: list[Event] = []
        memo: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        collectors = {name: RowCollector(name, plan, masks) for name, plan in (rows or {}).items()}
        handles = []
        try:
            for item in hooked:
                module = modules[item.name]
                if item.name in collectors:
                    handles.append(module.register_forward_hook(collectors[item.name]))
                    continue
                if item.pre:
                    handles.append(
                        module.register_forward_pre_hook(
                            self._recorder(events, memo, item.name, "pre"), with_kwargs=True
                        )
                    )
                if item.post:
                    handles.append(
                        module.register_forward_hook(self._recorder(events, memo, item.name, "post"), with_kwargs=True)
                    )
            if stop_after is not None:
                handles.append(modules[stop_after].register_forward_hook(_stop))
            per_batch = []
            with torch.no_grad():
                for batch, (args, kwargs) in enumerate(calls):
                    for collector in collectors.values():
                        collector.start_batch(batch)
                    try:
                        layer(*args, **kwargs)
                    except StopForward:
                        pass
                    for collector in collectors.values():
                        collector.end_batch()
                    per_batch.append(list(events))
                    events.clear()
                    memo.clear()
        finally:
            for handle in handles:
                handle.remove()
        statistics = {name: collector.result() for name, collector in collectors.items()}
        self.kept = {
            c.plan.keep: (c.kept, c.plan.form) for c in collectors.values() if c.plan.keep and c.kept is not None
        }
        self.sums = {name: c.held for name, c in collectors.items() if c.plan.hold}
        return (per_batch, statistics), time.perf_counter() - start

    def straddle(
        self, jobs: Sequence[tuple[str, Sequence[torch.Tensor]]]
    ) -> tuple[list[list[torch.Tensor]] | None, float]:
        """Form the straddling segments whose first rows this worker kept in its last :meth:`capture`: per job
        ``(keep name, the later shards' rows of the segment, in order)``, the segment's float64 lower-triangle
        blocks (:func:`qalgos.hessian.segment_sum` of the kept rows then the received ones). Returns (blocks
        per job, seconds), or (None, seconds) when a kept tail is not here (a replacement for a lost worker:
        the driver captures again). A segment of an input held for the chained reduce is appended to its held
        sums (it follows them in segment order) and its entry is an empty list."""
        start = time.perf_counter()
        if any(name not in self.kept for name, _rows in jobs):
            return None, time.perf_counter() - start
        out: list[list[torch.Tensor]] = []
        for name, received in jobs:
            kept, form = self.kept.pop(name)
            formed = form(torch.cat([kept, *received]))
            if name in self.sums:
                self.sums[name].append(formed)
                out.append([])
            else:
                out.append(formed.block_list())
        return out, time.perf_counter() - start

    def chain(self, name: str, blocks: Sequence[int], count: int, running: ChainPart | None) -> ChainPart:
        """One step of the chained reduce for the Gram blocks ``blocks`` (indices in :meth:`LowerGram.block_list`
        order, consecutive) of input ``name``: ``running`` (the previous worker's running sums of those blocks,
        or None: the total is zero so far) plus this worker's ``count`` held segment sums' blocks, one sum after
        another in segment order (the float64 additions :meth:`LowerGram.add_sum` makes, so the same bits). The
        held sums are freed after their last block. Raises :class:`~qlooper.errors.SegmentsLost` when this
        worker does not hold ``count`` sums of ``name`` (a replacement: the driver captures again)."""
        start = time.perf_counter()
        held = self.sums.get(name)
        if held is None or len(held) != count or count < 1:
            found = "none" if held is None else str(len(held))
            raise SegmentsLost(f"worker {self.name}: expected {count} held segment sums of {name!r}, found {found}")
        out = []
        for k, block in enumerate(blocks):
            acc = running.blocks[k] if running is not None else None
            for total in held:
                part = total.block_list()[block]
                acc = part if acc is None else acc + part  # 0 + s is s; a new tensor, the held sums stay unchanged
            out.append(acc)
        if blocks and blocks[-1] == len(held[0].block_list()) - 1:
            del self.sums[name]
        seconds = (running.seconds if running is not None else 0.0) + time.perf_counter() - start
        return ChainPart([block for block in out if block is not None], seconds)

    @staticmethod
    def _recorder(
        events: list[Event], memo: dict[int, tuple[torch.Tensor, torch.Tensor]], name: str, kind: str
    ) -> Callable[..., None]:
        def record(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], *_out: Any) -> None:
            events.append((name, kind, _snapshot(args, memo), dict(kwargs)))

        return record

    def replay(
        self, key: str, changed: dict[str, torch.Tensor], calls: Sequence[Call]
    ) -> tuple[list[torch.Tensor], float]:
        """Apply ``changed``; the layer's hidden-state output for each of ``calls`` (the next layer's inputs),
        and seconds."""
        start = time.perf_counter()
        layer = self._loaded(key, changed)
        with torch.no_grad():
            outputs = [layer_output(layer(*args, **kwargs)).detach() for args, kwargs in calls]
        return outputs, time.perf_counter() - start

    def run_on_layer(
        self, key: str, changed: dict[str, torch.Tensor], fn: Callable[..., Any], args: tuple[Any, ...]
    ) -> tuple[Any, float]:
        """Apply ``changed``; ``fn(layer, *args)`` on the held layer (the expert stand-ins' calls,
        :mod:`qlooper.expert_shards`) and its seconds."""
        start = time.perf_counter()
        out = fn(self._loaded(key, changed), *args)
        return out, time.perf_counter() - start

    def run(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
        """``fn(*args)`` (a module solve job) and its seconds."""
        start = time.perf_counter()
        out = fn(*args)
        return out, time.perf_counter() - start
