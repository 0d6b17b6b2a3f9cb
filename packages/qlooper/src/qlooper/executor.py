"""Executors: where a layer's calibration forwards and its module solves run.

The loop asks its executor (``LoopOptions.executor``) for four things per layer:

* ``begin_layer(index, name, layer)``: the layer about to be processed (materialized, no hooks yet);
* ``capture(ctx, stop_after)``: run every cached batch through ``ctx.layer`` so that the hooks the
  processor and the loop installed on its modules see each batch's inputs, in batch order, with
  ``ctx.batch``/``ctx.mask`` set; each forward may end after module ``stop_after``;
* ``replay(layer, cache)``: the quantized layer's outputs, i.e. the next layer's input cache;
* ``solve_map`` (``None`` or ``fn, jobs -> results``): independent module solves (processors read it from
  ``LayerContext.solve_map``; None means solve inline, as the in-process loop always did).

:class:`InProcessExecutor` is the loop as it was (and allows lockstep). :class:`ShardedExecutor` splits the
cached batches into contiguous shards, one per worker (:class:`~qlooper.shard_worker.LayerWorker`); each
worker runs a copy of the layer (shipped once per layer; each call then carries only the parameters the
driver's solves changed since the previous call) and records what the hooked modules received; the driver then
calls its own hooks with those recordings, batch by batch in batch order. Every statistic is therefore
accumulated in the same order, from the same tensors, as in one process: GPTQ's Hessian buffer and chunking,
AWQ's concatenated inputs and its inspect calls come out bit for bit the same (the workers' forwards give the
same bits as the driver's on the same CPU and torch: measured by the ``ray`` nox session). Forward hooks
replayed this way receive ``None`` as the output and pre-hooks' return values are ignored (the built-in
processors use neither). Modules whose hooks are only token counts and GPTQ's Hessian of a dense input are
not recorded: the workers return counts and Hessian pieces (rows before the first segment boundary in their
shard, whole segments' float64 sums, rows after the last) that the driver adds in worker order, the same
bits (:mod:`qlooper.worker_statistics`); a segment straddling shards is formed by the worker holding its
first rows, from the later shards' rows the driver passes on to it. With ``sum_reduce="chain"`` (the default) the
segment sums stay on the workers that formed them and the running total passes from worker to worker in segment
order, each adding its own (:meth:`~qlooper.shard_worker.LayerWorker.chain`, one Gram block per step, so the
steps pipeline): the same float64 additions in the same order as the driver's, and one sum per input reaches
the driver. Solves are spread round-robin over the workers.
:class:`LocalShardExecutor` keeps its workers in this process (tests, no Ray);
:class:`qlooper.ray_executor.RayExecutor` runs them as Ray actors.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from qalgos.hessian import LowerGram, gram_edges
from torch import nn

from .definition import ResolvedGroup
from .errors import ExecutorError, SegmentsLost
from .expert_shards import (
    ExpertLayer,
    describe_plan,
    log_unsharded,
    plan_expert_layer,
    run_expert_groups,
    traffic_bytes,
)
from .forward import capture_forward, layer_device, replay_forward
from .input_cache import InputCache
from .processors.base import LayerContext
from .shard_worker import Call, ChainPart, Event, HookedModule, LayerWorker
from .worker_statistics import (
    HessianRowsHook,
    RowPlan,
    ShardRows,
    Straddle,
    feed_chained,
    feed_rows,
    plannable,
    straddles,
    sum_bytes,
)

log = logging.getLogger(__name__)

SolveMap = Callable[[Callable[..., Any], Sequence[tuple[Any, ...]]], list[Any]]
"""``(fn, jobs) -> [fn(*job) for job in jobs]``, computed anywhere, returned in job order."""


class Executor(Protocol):
    """What the loop needs from an executor (see the module docstring)."""

    name: str
    supports_lockstep: bool
    solve_map: SolveMap | None

    def begin_layer(self, index: int, name: str, layer: nn.Module) -> None: ...

    def capture(self, ctx: LayerContext, stop_after: nn.Module | None) -> None: ...

    def replay(self, layer: nn.Module, cache: InputCache) -> InputCache: ...

    def describe(self) -> dict[str, Any]: ...


class InProcessExecutor:
    """Everything in this process, as the loop always ran (lockstep allowed, solves inline)."""

    name = "in-process"
    supports_lockstep = True
    solve_map: SolveMap | None = None

    def begin_layer(self, index: int, name: str, layer: nn.Module) -> None:
        return None

    def capture(self, ctx: LayerContext, stop_after: nn.Module | None) -> None:
        capture_forward(ctx, stop_after)

    def replay(self, layer: nn.Module, cache: InputCache) -> InputCache:
        return replay_forward(layer, cache)

    def describe(self) -> dict[str, Any]:
        return {"executor": self.name}


def shard_ranges(batches: int, workers: int) -> list[tuple[int, int]]:
    """Contiguous ``[lo, hi)`` batch ranges, one per worker that gets any (sizes differ by at most one)."""
    if workers < 1:
        raise ValueError(f"workers: expected at least 1, found {workers}")
    ranges, lo = [], 0
    for w in range(workers):
        hi = lo + batches // workers + (1 if w < batches % workers else 0)
        if hi > lo:
            ranges.append((lo, hi))
        lo = hi
    return ranges


def hooked_modules(layer: nn.Module) -> list[HookedModule]:
    """The layer's modules (named relative to it, ``""`` the layer itself) that carry forward (pre-)hooks."""
    out = []
    for name, module in layer.named_modules():
        pre, post = bool(module._forward_pre_hooks), bool(module._forward_hooks)
        if pre or post:
            out.append(HookedModule(name, pre, post))
    return out


def feed_hooks(module: nn.Module, kind: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Call ``module``'s own forward pre-hooks (``kind="pre"``) or forward hooks (``"post"``, output None)
    with a recorded call, in their registration order."""
    if kind == "pre":
        with_kwargs = module._forward_pre_hooks_with_kwargs
        for hook_id, hook in list(module._forward_pre_hooks.items()):
            hook(module, args, kwargs) if hook_id in with_kwargs else hook(module, args)
    else:
        with_kwargs = module._forward_hooks_with_kwargs
        for hook_id, hook in list(module._forward_hooks.items()):
            hook(module, args, kwargs, None) if hook_id in with_kwargs else hook(module, args, None)


@dataclass
class LayerTimes:
    """Wall seconds of one layer under a sharded executor (the cost model's inputs, docs/scaling.md).

    ``forward``: the slowest worker's compute per call, summed over the layer's capture and replay calls;
    ``transfer``: those calls' wall time minus ``forward`` (serialization, shipping, scheduling);
    ``reduce``: the driver feeding recordings to the hooks (statistics accumulated in batch order);
    ``solve``: wall time of the spread solve calls; ``layer_ship``: sending the layer copy to the workers;
    ``bytes_out``/``bytes_back``: tensor bytes of the forward calls' arguments (batches, and the changed
    parameters counted once per worker) and of their results (recordings, outputs); ``bytes_changed``: of
    those arguments, the changed parameters (once per worker); ``layer_bytes``: the layer's state-dict bytes
    (shipped once per worker in ``layer_ship``; every call carried all of them before changed-only shipping;
    without the experts when they are sharded); ``expert_bytes``: the sharded experts' traffic
    (:mod:`qlooper.expert_shards`): their weights and recorded calls to the owners, the owners' outputs back
    and on to the workers (tensor bytes; the ``QuantResult`` s not counted).
    ``solve_jobs`` / ``solve_waves``: the spread solve jobs and the waves they ran in (a wave is one job per
    worker, at once); ``bytes_solve``: tensor bytes of the jobs' arguments, a tensor counted once per worker
    that got it (GPTQ: each module's weight, and its input's float32 Hessian once per worker);
    ``ship_rounds``: the rounds the layer copy went out in, one after another (the Ray executor's staged
    broadcast, :mod:`qlooper.broadcast`: the nodes holding a copy double each round; 1 when every worker is on
    the driver's node, or in process).
    ``statistic``: of ``forward``, the slowest worker's seconds forming Hessian segment sums per call, summed
    (:mod:`.worker_statistics`); ``bytes_sums``: of ``bytes_back``, the bytes of those sums.
    ``straddled``: whole segments straddling shards, formed on the worker holding their first rows (their
    other rows passed through the driver: ``bytes_straddle``, also in ``bytes_out`` and ``bytes_back``, and
    the call in ``calls``); ``driver_rows``: token rows of GPTQ's dense inputs the driver added to an
    accumulator itself (their chunk products formed on the driver: rows before the first segment boundary
    and after the last whole segment).
    ``chained``: GPTQ inputs whose segment sums were chained through the workers (``sum_reduce="chain"``);
    ``chain``: the wall seconds of those chains (their adding seconds, summed over the workers, are also in
    ``forward`` and ``statistic``, the rest in ``transfer``); ``bytes_chain``: the running sums' bytes passed
    from worker to worker (peer to peer on Ray; the one sum per input that reaches the driver is in
    ``bytes_sums``).
    """

    layer: int
    forward: float = 0.0
    transfer: float = 0.0
    reduce: float = 0.0
    solve: float = 0.0
    layer_ship: float = 0.0
    calls: int = 0
    bytes_out: int = 0
    bytes_back: int = 0
    bytes_changed: int = 0
    layer_bytes: int = 0
    solve_jobs: int = 0
    solve_waves: int = 0
    bytes_solve: int = 0
    ship_rounds: int = 0
    expert_bytes: int = 0
    statistic: float = 0.0
    bytes_sums: int = 0
    straddled: int = 0
    bytes_straddle: int = 0
    driver_rows: int = 0
    chained: int = 0
    chain: float = 0.0
    bytes_chain: int = 0


@dataclass
class LostWorker:
    """A worker that died during a call: its identity, what it was doing, and the replacement's outcome."""

    name: str
    host: str
    pid: int
    layer: int
    during: str
    error: str


@dataclass
class ShardedExecutor:
    """Batches sharded over workers, statistics reduced in batch order, solves spread (module docstring).

    Subclasses provide ``_call(method, per_worker_args, during, shared=None) -> [result per worker]`` (the
    first ``len(per_worker_args)`` workers' calls of the :class:`LayerWorker` method with their args, results
    in worker order; ``shared``: where the transport may keep, by ``id``, its copies of arguments several
    workers get, across calls) and ``_ship(key, layer)``. The
    driver keeps a copy of the layer state the workers hold (``_held``, one layer of memory) to find what
    its solves changed: a parameter is re-sent when any of its bytes differ.

    ``shard_experts``: a GPTQ MoE layer's experts are owned by workers instead of token-sharded
    (:mod:`qlooper.expert_shards`, same bits); False keeps every expert on every worker. ``serializes_calls``:
    the transport copies a call's arguments when it is submitted (Ray); False (in-process workers): a caller
    copies what a worker would change in place (an owner job's expert modules). ``sum_reduce``: ``"chain"``
    (default): a GPTQ input's segment sums are added along the workers in segment order (the module docstring);
    ``"driver"``: every segment sum comes back and the driver adds them (the same bits; more bytes at the
    driver). Subclasses also provide ``_chain_step`` and ``_chain_gather`` (the chain's transport).
    """

    workers: int
    name: str = "sharded"
    supports_lockstep: bool = False
    shard_experts: bool = True
    serializes_calls: bool = True
    sum_reduce: str = "chain"
    times: list[LayerTimes] = field(default_factory=list)
    lost: list[LostWorker] = field(default_factory=list)
    experts: dict[str, dict[str, Any]] = field(default_factory=dict)
    _key: str = ""
    _index: int = -1
    _held: dict[str, torch.Tensor] = field(default_factory=dict)
    _experts: ExpertLayer | None = None
    _planned_for: str = ""
    _raw_inputs: set[str] = field(default_factory=set)  # modules whose predicted token rows were wrong

    def __post_init__(self) -> None:
        if self.sum_reduce not in ("chain", "driver"):
            raise ExecutorError(f"sum_reduce: expected 'chain' or 'driver', found {self.sum_reduce!r}")

    @property
    def solve_map(self) -> SolveMap:
        return self._solve_map

    # -- transport (subclasses) -------------------------------------------------------------------------

    def _ship(self, key: str, layer: nn.Module) -> int:
        """Give every worker a copy of ``layer`` for the calls of ``key``; returns the rounds it took."""
        raise NotImplementedError

    def _call(
        self, method: str, per_worker: Sequence[tuple[Any, ...]], during: str, shared: dict[int, Any] | None = None
    ) -> list[Any]:
        raise NotImplementedError

    def _chain_step(self, index: int, args: tuple[Any, ...]) -> Any:
        """Submit worker ``index``'s :meth:`LayerWorker.chain` call with ``args`` (whose last item is the
        previous step's handle, a :class:`ChainPart` or None); returns this step's handle."""
        raise NotImplementedError

    def _chain_gather(self, handles: Sequence[Any], workers: Sequence[int], during: str) -> list[ChainPart]:
        """The values of the chains' last handles. Raises :class:`SegmentsLost` when a worker of ``workers``
        lost its held sums (it is then replaced)."""
        raise NotImplementedError

    # -- the executor protocol ----------------------------------------------------------------------------

    def plan_experts(
        self, ctx: LayerContext, groups: Sequence[ResolvedGroup], processor: Any, true_sequential: bool
    ) -> ExpertLayer | None:
        """Called by the loop before :meth:`begin_layer`: whether this layer's experts are sharded over the
        workers (:mod:`qlooper.expert_shards`); the reason when not is logged and kept for :meth:`describe`."""
        self._experts, self._planned_for = None, ctx.name
        if not self.shard_experts:
            return None
        plan, reason = plan_expert_layer(ctx.layer, groups, processor, true_sequential, self.workers)
        row = describe_plan(plan, reason, self.workers)
        if row is not None:
            self.experts[ctx.name] = row
        if reason is not None:
            log_unsharded(ctx.name, reason)
        self._experts = plan
        return plan

    def run_experts(self, ctx: LayerContext, unit: Sequence[ResolvedGroup], processor: Any, policy: Any) -> list[Any]:
        """The loop's call for a unit of expert groups planned by :meth:`plan_experts`: the first solves every
        expert group of the layer (their results, in group order), later ones return nothing."""
        if self._experts is None:
            raise ValueError(f"layer {ctx.name}: no expert plan")
        if self._experts.done:
            return []
        return run_expert_groups(self, self._experts, ctx, processor, policy)

    def run_owner_jobs(self, jobs: Sequence[tuple[Any, ...]], during: str) -> list[Any]:
        """``(fn, args)`` per owner, worker ``i`` running job ``i``; results in job order (timed as solve)."""
        start = time.perf_counter()
        outs = self._call("run", [(fn, *args) for fn, args in jobs], during)
        times = self.times[-1]
        times.solve += time.perf_counter() - start
        times.expert_bytes += sum(traffic_bytes(args[0]) for _fn, args in jobs)
        times.expert_bytes += sum(traffic_bytes(out) for out, _seconds in outs)
        return [out for out, _seconds in outs]

    def _setup_calls(self, index: int) -> list[tuple[str, tuple[Any, ...]]]:
        """The calls that set up worker ``index`` in this layer beyond the layer and state (the expert
        stand-ins' tables): a replacement for a lost worker gets them too."""
        return self._experts.setup.get(index, []) if self._experts is not None else []

    def begin_layer(self, index: int, name: str, layer: nn.Module) -> None:
        start = time.perf_counter()
        self._index, self._key = index, f"{index}:{name}"
        if self._planned_for != name:  # no plan_experts call for this layer: nothing sharded by expert
            self._experts = None
        shipped = self._experts.worker_layer(layer) if self._experts is not None else layer
        self._held = {k: v.clone() for k, v in _state(shipped).items()}
        rounds = self._ship(self._key, shipped)
        ship = LayerTimes(index, layer_ship=time.perf_counter() - start, layer_bytes=tensor_bytes(self._held))
        ship.ship_rounds = rounds
        self.times.append(ship)

    def _changed(self, layer: nn.Module) -> dict[str, torch.Tensor]:
        """The state entries of ``layer`` whose bytes differ from what the workers hold (``_held``)."""
        state = _state(layer)
        if self._experts is not None:  # the workers hold stand-ins, not the experts
            state = {k: v for k, v in state.items() if not self._experts.is_expert_key(k)}
        if state.keys() != self._held.keys():
            raise ValueError(
                f"layer {self._key}: its state entries changed during the layer "
                f"(added {sorted(state.keys() - self._held.keys())}, gone {sorted(self._held.keys() - state.keys())})"
            )
        return {k: v for k, v in state.items() if not same_bits(v, self._held[k])}

    def _timed_calls(self, method: str, per_worker: list[tuple[Any, ...]], during: str) -> list[Any]:
        start = time.perf_counter()
        results = self._call(method, per_worker, during)
        wall = time.perf_counter() - start
        compute = max((seconds for _, seconds in results), default=0.0)
        times = self.times[-1]
        times.forward += compute
        times.transfer += max(0.0, wall - compute)
        times.calls += 1
        times.bytes_out += sum(tensor_bytes(args) for args in per_worker)  # the state: once per worker
        times.bytes_back += tensor_bytes([out for out, _ in results])
        changed = per_worker[0][1] if per_worker else {}
        times.bytes_changed += tensor_bytes(changed) * len(per_worker)
        self._held.update({k: v.clone() for k, v in changed.items()})  # every worker holds them now
        return [out for out, _ in results]

    def capture(self, ctx: LayerContext, stop_after: nn.Module | None, again: bool = False) -> None:
        if ctx.cache is None:
            raise ValueError("capture: the layer has no input cache")
        cache = ctx.cache
        modules = dict(ctx.layer.named_modules())
        names = {module: name for name, module in modules.items()}
        stop = names.get(stop_after) if stop_after is not None else None
        hooked = hooked_modules(ctx.layer)
        changed = self._changed(ctx.layer)
        ranges = self._every_worker_ranges(len(cache))
        plans, layouts = self._row_plans(modules, hooked, cache, ranges)
        per_worker = [
            (
                self._key,
                changed,
                [_call_of(cache, b) for b in range(lo, hi)],
                hooked,
                stop,
                plan,
                [cache.token_masks[b] for b in range(lo, hi)] if plan else [],
            )
            for (lo, hi), plan in zip(ranges, plans, strict=True)
        ]
        recorded = self._timed_calls("capture", per_worker, f"capture forward of layer {ctx.name}")
        rows = [statistics for _events, statistics in recorded]
        mismatched = {name: r.mismatch for shard in rows for name, r in shard.items() if r.mismatch is not None}
        if mismatched:  # a predicted token count was wrong: record these modules' inputs instead, from now on
            log.info("layer %s: inputs captured raw (token rows not as predicted): %s", ctx.name, mismatched)
            self._raw_inputs.update(mismatched)
            self.capture(ctx, stop_after)
            return
        sums = self._straddle(layouts, rows, ctx.name)
        totals = self._chain(modules, plans, layouts, rows, ctx.name) if sums is not None else None
        if sums is None or totals is None:  # a worker holding rows or sums was replaced: they are gone
            what = "a straddling segment's owner" if sums is None else "a worker holding segment sums"
            if again:
                raise ExecutorError(f"layer {ctx.name}: {what} was lost twice in one capture")
            log.warning("layer %s: %s was replaced; capturing again", ctx.name, what)
            self.capture(ctx, stop_after, again=True)
            return
        start = time.perf_counter()
        driver_rows = 0
        try:
            for (lo, _hi), (shard, _statistics) in zip(ranges, recorded, strict=True):
                for offset, events in enumerate(shard):
                    _feed_batch(ctx, modules, lo + offset, events)
            for name in plans[0]:
                pieces = [shard[name] for shard in rows]
                if name in totals:
                    total, segments = totals[name]
                    driver_rows += feed_chained(modules[name], pieces, layouts.get(name, []), total, segments)
                else:
                    driver_rows += feed_rows(modules[name], pieces, layouts.get(name, []), sums.get(name, []))
        finally:
            ctx.batch, ctx.mask = -1, None
        times = self.times[-1]
        times.reduce += time.perf_counter() - start
        times.driver_rows += driver_rows
        times.statistic += max((sum(r.seconds for r in shard.values()) for shard in rows), default=0.0)
        times.bytes_sums += sum(sum_bytes(list(shard.values())) for shard in rows)

    def _row_plans(
        self,
        modules: dict[str, nn.Module],
        hooked: list[HookedModule],
        cache: InputCache,
        ranges: list[tuple[int, int]],
    ) -> tuple[list[dict[str, RowPlan]], dict[str, list[Straddle]]]:
        """Per worker, the hooked modules whose inputs it turns into statistics (:mod:`.worker_statistics`):
        token counts only, or a GPTQ input's head rows, whole segments and tail rows, its segment boundaries
        placed from the rows each earlier worker's batches carry (their token masks' counts); and per GPTQ
        input, its segments straddling shards (:func:`~.worker_statistics.straddles`: their owners keep
        their tails)."""
        plans: list[dict[str, RowPlan]] = [{} for _ in ranges]
        layouts: dict[str, list[Straddle]] = {}
        counts: list[int] | None = None
        for item in hooked:
            kind = False if item.name in self._raw_inputs else plannable(modules[item.name])
            if kind is True:
                for plan in plans:
                    plan[item.name] = RowPlan(in_features=0)
            elif isinstance(kind, HessianRowsHook):
                counts = counts if counts is not None else [int(m.sum()) for m in cache.token_masks]
                segment, first, offset = kind.segment_rows(), kind.task.rows_to_boundary(), 0
                shard_rows = [sum(counts[lo:hi]) for lo, hi in ranges]
                layouts[item.name] = straddles(first, segment, shard_rows)
                owners = {s.owner for s in layouts[item.name]}
                # chained: from a segment boundary (no row before the first segment), at least one whole segment
                hold = self.sum_reduce == "chain" and first == 0 and sum(shard_rows) >= segment
                for w, (plan, (lo, hi)) in enumerate(zip(plans, ranges, strict=True)):
                    expected = tuple(counts[lo:hi])
                    head = min(sum(expected), (first - offset) % segment)
                    keep = item.name if w in owners else ""
                    plan[item.name] = RowPlan(kind.in_features, expected, head, segment, keep=keep, hold=hold)
                    offset += sum(expected)
        return plans, layouts

    def _straddle(
        self, layouts: dict[str, list[Straddle]], rows: list[dict[str, ShardRows]], layer: str
    ) -> dict[str, list[list[torch.Tensor]]] | None:
        """The straddling segments' sums, formed by their owners (one call to the workers up to the last
        owner; each gets, per segment it owns, the later shards' head rows of it, through the driver): per
        input, the blocks in :func:`~.worker_statistics.straddles` order. None when an owner no longer holds
        its kept tail (it was replaced)."""
        jobs: list[list[tuple[str, list[torch.Tensor]]]] = [[] for _ in range(self.workers)]
        order: list[tuple[str, int, int]] = []  # (input, owner, index in the owner's jobs)
        for name, layout in layouts.items():
            for s in layout:
                order.append((name, s.owner, len(jobs[s.owner])))
                jobs[s.owner].append((name, [rows[w][name].head for w in s.senders]))
        if not order:
            return {}
        last = max(owner for _name, owner, _k in order)
        per_worker = [(jobs[w],) for w in range(last + 1)]
        start = time.perf_counter()
        results = self._call("straddle", per_worker, f"straddling segments of layer {layer}")
        wall = time.perf_counter() - start
        compute = max((seconds for _, seconds in results), default=0.0)
        times = self.times[-1]
        times.forward += compute
        times.statistic += compute
        times.transfer += max(0.0, wall - compute)
        times.calls += 1
        sent = sum(tensor_bytes(args) for args in per_worker)
        back = tensor_bytes([out for out, _ in results])
        times.bytes_out += sent
        times.bytes_back += back
        times.bytes_sums += back
        times.bytes_straddle += sent
        if any(out is None for out, _ in results):
            return None
        times.straddled += len(order)
        sums: dict[str, list[list[torch.Tensor]]] = {}
        for name, owner, k in order:
            sums.setdefault(name, []).append(results[owner][0][k])
        return sums

    def _chain(
        self,
        modules: dict[str, nn.Module],
        plans: list[dict[str, RowPlan]],
        layouts: dict[str, list[Straddle]],
        rows: list[dict[str, ShardRows]],
        layer: str,
    ) -> dict[str, tuple[LowerGram, int]] | None:
        """The chained reduce of every input planned with ``hold``: per Gram block, the running sum goes from
        each worker holding segment sums of the input to the next, in worker order (= segment order: a worker's
        whole segments, then the straddling one it owns), starting from the accumulator's total
        (:meth:`~qalgos.gptq.GPTQ.chain_start`; None when zero). Every step is submitted at once, block by
        block, so the blocks pipeline through the workers. Returns per input (total, segments), or None when a
        worker of a chain was replaced (its held sums are gone)."""
        chained = [name for name, plan in (plans[0].items() if plans else []) if plan.hold]
        if not chained:
            return {}
        start = time.perf_counter()
        try:
            handles, meta, chain_bytes = self._submit_chains(chained, modules, layouts, rows, layer)
            parts_back = self._chain_gather(handles, range(self.workers), f"chained segment sums of layer {layer}")
        except SegmentsLost as exc:
            log.info("layer %s: %s", layer, exc)
            return None
        wall = time.perf_counter() - start
        compute = sum(part.seconds for part in parts_back)
        times = self.times[-1]
        times.chain += wall
        times.forward += compute
        times.statistic += compute
        times.transfer += max(0.0, wall - compute)
        times.calls += 1
        times.chained += len(chained)
        times.bytes_chain += chain_bytes
        back = tensor_bytes([part.blocks for part in parts_back])
        times.bytes_back += back
        times.bytes_sums += back
        out: dict[str, tuple[LowerGram, int]] = {}
        at = 0
        for name, parts, segments in meta:
            n = plans[0][name].in_features
            blocks = [block for part in parts_back[at : at + parts] for block in part.blocks]
            out[name] = (LowerGram.from_blocks(n, blocks), segments)
            at += parts
        return out

    def _submit_chains(
        self,
        chained: list[str],
        modules: dict[str, nn.Module],
        layouts: dict[str, list[Straddle]],
        rows: list[dict[str, ShardRows]],
        layer: str,
    ) -> tuple[list[Any], list[tuple[str, int, int]], int]:
        """Submit every chain step (part by part, each part along the holders in worker order; a part is
        consecutive Gram blocks of about :data:`CHAIN_PART_BYTES`). Returns the last handle per (input, part),
        per input (name, parts, segments), and the bytes passed between workers."""
        handles: list[Any] = []
        meta: list[tuple[str, int, int]] = []  # (input, parts, segments)
        chain_bytes = 0
        for name in chained:
            owned = {s.owner for s in layouts.get(name, [])}
            counts = [(w, shard[name].held + (1 if w in owned else 0)) for w, shard in enumerate(rows)]
            holders = [(w, count) for w, count in counts if count]
            if not holders:
                raise ExecutorError(f"layer {layer}: {name} was planned for a chained reduce, no worker holds a sum")
            hook = plannable(modules[name])
            if not isinstance(hook, HessianRowsHook):
                raise ValueError(f"layer {layer}: {name} was planned for a chained reduce without its GPTQ hook")
            n = hook.in_features
            parts = chain_parts(n)
            first = hook.task.chain_start()
            chain_bytes += sum_byte_count(n) * (len(holders) - 1 + (first is not None))
            meta.append((name, len(parts), sum(count for _w, count in holders)))
            for part in parts:
                handle: Any = None
                if first is not None:
                    handle = ChainPart([first.block_list()[b] for b in part], 0.0)
                for w, count in holders:
                    handle = self._chain_step(w, (name, part, count, handle))
                handles.append(handle)
        return handles, meta, chain_bytes

    def _every_worker_ranges(self, batches: int) -> list[tuple[int, int]]:
        """:func:`shard_ranges` padded with empty ranges: every worker gets each forward call (and with it
        the changed parameters), also when there are fewer batches than workers."""
        ranges = shard_ranges(batches, self.workers)
        return ranges + [(batches, batches)] * (self.workers - len(ranges))

    def replay(self, layer: nn.Module, cache: InputCache) -> InputCache:
        changed = self._changed(layer)
        ranges = self._every_worker_ranges(len(cache))
        per_worker = [(self._key, changed, [_call_of(cache, b) for b in range(lo, hi)]) for lo, hi in ranges]
        shards = self._timed_calls("replay", per_worker, f"replay forward of layer {self._key}")
        outputs = [out for shard in shards for out in shard]
        hidden = [cache.layer_inputs[b][0] for b in range(len(cache))]
        return cache.with_hidden([out.to(h.device) for out, h in zip(outputs, hidden, strict=True)])

    def _solve_map(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]]) -> list[Any]:
        """Jobs round-robin over the workers in waves of one job per worker (each worker runs ``fn(*job)``);
        results in job order. A tensor several jobs carry (an input's Hessian for q, k and v) is one object:
        the transport sends it once per call and worker (``_call``'s ``shared``)."""
        start = time.perf_counter()
        results: list[Any] = [None] * len(jobs)
        shared: dict[int, Any] = {}
        sent: list[set[int]] = [set() for _ in range(self.workers)]  # tensors each worker got, for the bytes
        for first in range(0, len(jobs), self.workers):
            wave = list(range(first, min(first + self.workers, len(jobs))))
            per_worker = [(fn, *jobs[i]) for i in wave]
            outs = self._call("run", per_worker, f"solves of layer {self._key}", shared)
            for i, (out, _seconds) in zip(wave, outs, strict=True):
                results[i] = out
            if self.times:
                times = self.times[-1]
                times.solve_waves += 1
                times.solve_jobs += len(wave)
                times.bytes_solve += sum(tensor_bytes(args, sent[w]) for w, args in enumerate(per_worker))
        if self.times:
            self.times[-1].solve += time.perf_counter() - start
        return results

    def describe(self) -> dict[str, Any]:
        """``executor``, ``workers``, ``lost_workers`` (names and what they were doing), ``layer_times``
        (:class:`LayerTimes` per layer, as dicts) and ``moe_experts`` (per MoE layer: its experts per owning
        worker, or why they were token-sharded) for the run report."""
        return {
            "executor": self.name,
            "workers": self.workers,
            "lost_workers": [vars(lost) for lost in self.lost],
            "layer_times": [vars(t) for t in self.times],
            "moe_experts": dict(self.experts),
        }


def _state(layer: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in layer.state_dict(keep_vars=True).items()}


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors hold the same dtype, shape and bytes (``-0.0`` differs from ``0.0``, a NaN
    equals the same NaN), unlike ``torch.equal``."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def tensor_bytes(value: Any, seen: set[int] | None = None) -> int:
    """Bytes of the distinct tensors in ``value`` (nested tuples, lists, dicts; one object counted once, as
    pickle sends it once)."""
    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        if id(value) in seen:
            return 0
        seen.add(id(value))
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(v, seen) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v, seen) for v in value)
    return 0


CHAIN_PART_BYTES = 64 << 20
"""The chained reduce passes a running sum on in parts of consecutive Gram blocks of about this many bytes: each
part is one call per worker, so the parts pipeline through the workers (worker k adds part p while worker k + 1
adds part p - 1); smaller parts pipeline better but pay a call's latency more often (at 25 GB/s a part of 64
MiB takes about as long to move as 2.7 ms of call latency)."""


def chain_parts(n: int, part_bytes: int | None = None) -> list[tuple[int, ...]]:
    """The Gram block indices (:meth:`~qalgos.hessian.LowerGram.block_list` order) of a sum over ``n`` inputs,
    cut into consecutive parts of at least ``part_bytes`` (default :data:`CHAIN_PART_BYTES`) each (the last may
    be smaller; one part for a small sum)."""
    part_bytes = CHAIN_PART_BYTES if part_bytes is None else part_bytes
    edges = gram_edges(n)
    sizes = [edges[k + 1] - edges[k] for k in range(len(edges) - 1)]
    parts: list[tuple[int, ...]] = []
    current: list[int] = []
    held = 0
    index = 0
    for i in range(len(sizes)):
        for j in range(i + 1):
            current.append(index)
            held += 8 * sizes[i] * sizes[j]
            index += 1
            if held >= part_bytes:
                parts.append(tuple(current))
                current, held = [], 0
    if current:
        parts.append(tuple(current))
    return parts


def sum_byte_count(n: int) -> int:
    """Bytes of one float64 lower-triangle sum over ``n`` inputs (:class:`~qalgos.hessian.LowerGram`)."""
    edges = gram_edges(n)
    sizes = [edges[k + 1] - edges[k] for k in range(len(edges) - 1)]
    return 8 * sum(sizes[i] * sizes[j] for i in range(len(sizes)) for j in range(i + 1))


def _call_of(cache: InputCache, batch: int) -> Call:
    args, kwargs = cache.call_args(batch)
    return list(args), dict(kwargs)


def _feed_batch(ctx: LayerContext, modules: dict[str, nn.Module], batch: int, events: list[Event]) -> None:
    if ctx.cache is None:
        raise ValueError("capture: the layer has no input cache")
    ctx.batch = batch
    ctx.mask = ctx.cache.token_masks[batch].to(layer_device(ctx.layer))
    for name, kind, args, kwargs in events:
        feed_hooks(modules[name], kind, args, kwargs)


class LocalShardExecutor(ShardedExecutor):
    """Shard workers in this process, each with its own deep copy of the layer (no Ray needed).

    Tests use it to check the sharded path against the in-process loop; its calls run one after another.
    """

    def __init__(self, workers: int = 2, shard_experts: bool = True, sum_reduce: str = "chain") -> None:
        super().__init__(
            workers=workers,
            name="local-shards",
            shard_experts=shard_experts,
            serializes_calls=False,
            sum_reduce=sum_reduce,
        )
        self._workers = [LayerWorker(f"local-{i}") for i in range(workers)]
        self._shipped: tuple[str, nn.Module] | None = None

    def _ship(self, key: str, layer: nn.Module) -> int:
        self._shipped = (key, layer)
        for worker in self._workers:
            worker.set_layer(key, copy.deepcopy(layer))
        return 1

    def replace_worker(self, index: int) -> None:
        """Put a fresh worker in place of worker ``index`` and bring it up to date as a Ray replacement is
        (the shipped layer, the driver's current state, the layer's setup calls): tests of a lost worker."""
        worker = LayerWorker(f"local-{index}")
        if self._shipped is not None:
            key, layer = self._shipped
            worker.set_layer(key, copy.deepcopy(layer))
            worker.update(key, self._held)
            for method, args in self._setup_calls(index):
                getattr(worker, method)(*args)
        self._workers[index] = worker

    def _call(
        self, method: str, per_worker: Sequence[tuple[Any, ...]], during: str, shared: dict[int, Any] | None = None
    ) -> list[Any]:
        return [getattr(self._workers[i], method)(*args) for i, args in enumerate(per_worker)]

    def _chain_step(self, index: int, args: tuple[Any, ...]) -> Any:
        return self._workers[index].chain(*args)

    def _chain_gather(self, handles: Sequence[Any], workers: Sequence[int], during: str) -> list[ChainPart]:
        return list(handles)
