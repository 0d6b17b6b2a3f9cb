"""MoE experts sharded over a sharded executor's workers (GPTQ): each owner holds and solves only its experts.

Within one MoE block an expert's input does not depend on another expert's output, so for a layer whose
expert groups qualify (:func:`plan_expert_layer`) the sharded executor runs them in three steps instead of
capturing every expert on every worker:

A. **Record** (token-sharded, like any capture): every worker's copy of the layer has each expert module
   replaced by an :class:`ExpertStandIn` (no weights: a meta-device template gives its output's shape). One
   forward per cached batch, stopped after the MoE block, records every expert call's arguments (cloned) with
   the batch and a fingerprint of the arguments; the stand-ins return zeros (their values are never used).
B. **Solve on the owners**: expert ``E[i]`` (the i-th expert in index order) is owned by worker ``w`` when ``i``
   falls in ``shard_ranges(experts, workers)[w]`` (contiguous blocks, sizes differing by at most one; with more
   workers than experts the last workers own none). Each owner receives only its experts' (float) modules,
   their recorded calls in one-process order (batch order, then call order within the batch; calls never
   concatenated, so every GEMM has the same row count as in one process) and those batches' token masks, and
   runs :func:`solve_owned_experts`: per expert group in definition order the processor's own ``attach``
   hooks and the loop's token counters, every recorded call through the expert module, the loop's fallback
   marks (:mod:`qlooper.coverage`), then the processor's own inline ``process`` (which installs the solved
   weights in the owner's copy, so the next group's inputs are the quantized earlier modules' outputs, as in
   one process); finally each expert's output for every recorded call. The ``ModuleResult`` s come back to the
   driver, which installs each dequantized weight in its own layer (as ``GPTQProcessor`` does) and returns
   them in the groups' module order; the finalizers pack them as always.
C. **Replay with precomputed outputs**: the owners' outputs go to the worker that recorded each call (a table
   fingerprint -> output); from then on each stand-in returns the output recorded for its input (an input
   whose fingerprint is not in the table raises :class:`~qlooper.errors.ExecutorError`), so the block's own
   combination code (routing weights, ``index_add_``) runs unchanged on the workers: the next layer's inputs,
   and any later capture, are bit for bit one process's.

A worker that owns nothing still gets the record call and its table. What a replacement for a lost worker
needs is what it is sent: the layer with stand-ins and the driver's current state (as for any call), the
tables sent so far (the executor keeps them per worker, :attr:`ExpertLayer.setup`), and an owner's job carries
its experts' weights and calls whole, so a repeated job gives the same results.

Not handled (the layer runs today's token-sharded path, logged and listed in the executor's ``describe()``):
processors other than GPTQ (``shard_experts`` unset; AWQ's scale search needs the block's own outputs),
``true_sequential=False``, expert groups that are not consecutive or also hold modules outside the experts, and
expert containers with a forward of their own (fused or unfused 3-D experts call their experts' linears
directly; only containers without one, ``nn.ModuleList``/``nn.ModuleDict``, whose block calls ``expert(x)``).
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from qalgos.fallback import FallbackPolicy
from torch import nn

from .coverage import mark_fallbacks
from .definition import EXPERT_WILDCARD, ModelDefinition, ResolvedGroup, ResolvedModule, get_submodule
from .errors import ExecutorError, StopForward
from .processors.base import LayerContext, ModuleResult, replace_weight
from .worker_statistics import TokenCountHook

log = logging.getLogger(__name__)

Recorded = tuple[int, tuple[Any, ...], dict[str, Any]]
"""One expert call as recorded: (batch index, positional args, keyword args)."""


# -- the stand-ins on the workers -------------------------------------------------------------------------


@dataclass
class StandInState:
    """What a worker's stand-ins share: ``mode`` (``"idle"``: return zeros, ``"record"``, ``"replay"``), the
    batch being recorded, the records ``(batch position, expert, args, kwargs, fingerprint)`` and the replay
    table ``(expert, fingerprint) -> output``."""

    mode: str = "idle"
    batch: int = -1
    records: list[tuple[int, int, tuple[Any, ...], dict[str, Any], str]] = field(default_factory=list)
    outputs: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)


def fingerprint(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """A digest of an expert call's arguments: each tensor's dtype, shape and bytes, other values' repr."""
    digest = hashlib.blake2b(digest_size=16)
    for value in (*args, *sorted(kwargs.items())):
        for item in value if isinstance(value, tuple) else (value,):
            if isinstance(item, torch.Tensor):
                digest.update(f"{item.dtype}{tuple(item.shape)}".encode())
                digest.update(item.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().data)
            else:
                digest.update(repr(item).encode())
    return digest.hexdigest()


def _to_meta(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.empty_like(value, device="meta")
    if isinstance(value, (tuple, list)):
        return type(value)(_to_meta(v) for v in value)
    if isinstance(value, dict):
        return {k: _to_meta(v) for k, v in value.items()}
    return value


def _cloned(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_cloned(v) for v in value)
    if isinstance(value, dict):
        return {k: _cloned(v) for k, v in value.items()}
    return value


def meta_copy(module: nn.Module) -> nn.Module:
    """A copy of ``module`` whose parameters and buffers are on the meta device (no data copied)."""
    memo: dict[int, Any] = {}
    for p in module.parameters():
        memo[id(p)] = nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in module.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(module, memo)


class ExpertStandIn(nn.Module):
    """Takes an expert module's place in a worker's layer copy (module docstring): no parameters; its
    template (a meta copy of the expert, not a registered submodule) gives the output's shape and dtype."""

    def __init__(self, expert: int, template: nn.Module, state: StandInState) -> None:
        super().__init__()
        self.expert = expert
        object.__setattr__(self, "template", template)  # not a submodule: no state-dict entries
        object.__setattr__(self, "state", state)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name.startswith("_"):  # copy and pickle probe for dunders
                raise
            raise ExecutorError(
                f"expert {self.expert}: the MoE block reached {name!r} of an expert directly; expert sharding "
                "needs a block that calls each expert module (expert(x)); run this model with "
                "ShardedExecutor(shard_experts=False)"
            ) from None

    def forward(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        state: StandInState = self.state
        if state.mode == "replay":
            key = (self.expert, fingerprint(args, kwargs))
            if key not in state.outputs:
                raise ExecutorError(
                    f"expert {self.expert}: received an input that was not recorded when its calls were captured "
                    "(a module upstream of the experts changed after them: groups must be listed in forward order)"
                )
            return state.outputs[key].clone()
        if state.mode == "record":
            args, kwargs = _cloned(args), _cloned(kwargs)
            state.records.append((state.batch, self.expert, args, kwargs, fingerprint(args, kwargs)))
        out = self.template(*_to_meta(args), **_to_meta(kwargs))
        if not isinstance(out, torch.Tensor):
            raise ExecutorError(f"expert {self.expert}: expected a tensor output, found {type(out).__name__}")
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        return torch.zeros(out.shape, dtype=out.dtype, device=device)


def _state_of(layer: nn.Module) -> StandInState:
    for module in layer.modules():
        if isinstance(module, ExpertStandIn):
            return module.state  # type: ignore[no-any-return]
    raise ExecutorError("expert call: the worker's layer holds no expert stand-ins")


def record_expert_calls(
    layer: nn.Module, calls: Sequence[tuple[list[Any], dict[str, Any]]], stop_after: str | None
) -> list[tuple[int, int, tuple[Any, ...], dict[str, Any], str]]:
    """Worker side of step A: run ``calls`` (this shard's batches) through ``layer``, stopping after module
    ``stop_after``; returns the stand-ins' records ``(batch position in calls, expert, args, kwargs,
    fingerprint)`` in call order."""
    state = _state_of(layer)
    state.mode, state.records = "record", []
    handle = None
    if stop_after is not None:

        def stop(_m: nn.Module, _i: Any, _o: Any) -> None:
            raise StopForward("expert calls recorded")

        handle = get_submodule(layer, stop_after, what="MoE block").register_forward_hook(stop)
    try:
        with torch.no_grad():
            for position, (args, kwargs) in enumerate(calls):
                state.batch = position
                try:
                    layer(*args, **kwargs)
                except StopForward:
                    pass
        return state.records
    finally:
        state.mode, state.records, state.batch = "idle", [], -1
        if handle is not None:
            handle.remove()


def set_expert_outputs(layer: nn.Module, table: dict[tuple[int, str], torch.Tensor]) -> int:
    """Worker side of step C: the stand-ins return ``table[(expert, fingerprint)]`` from now on."""
    state = _state_of(layer)
    state.outputs, state.mode = dict(table), "replay"
    return len(table)


# -- the owners --------------------------------------------------------------------------------------------


@dataclass
class OwnerJob:
    """What one owner receives: its experts' float modules and recorded calls, the groups to solve."""

    layer_index: int
    layer_name: str
    definition: ModelDefinition
    processor: Any
    groups: list[tuple[int, Any, list[tuple[int, str, str, str, str]]]]
    """(group index, GroupSpec, [(expert, path inside the expert, name in layer, full name, input key)])"""
    experts: dict[int, nn.Module]
    calls: dict[int, list[Recorded]]
    masks: dict[int, torch.Tensor]
    policy: FallbackPolicy
    total_tokens: int


@dataclass
class OwnerResult:
    """An owner's answer: results per group (group order, then module order), tokens and fallback marks
    per module full name, and each expert's output per recorded call."""

    results: list[list[ModuleResult]]
    tokens: dict[str, int]
    fallback: dict[str, str]
    outputs: dict[int, list[torch.Tensor]]


def traffic_bytes(item: OwnerJob | OwnerResult) -> int:
    """Tensor bytes an owner job or answer carries: weights, recorded calls and masks; outputs and the
    results' dequantized weights (a ``QuantResult`` s codes and scales not counted)."""
    from .executor import tensor_bytes

    if isinstance(item, OwnerJob):
        weights = [dict(m.state_dict()) for m in item.experts.values()]
        return tensor_bytes([weights, item.calls, item.masks])
    dequantized = [r.result.dequantized for results in item.results for r in results if r.result is not None]
    return tensor_bytes([item.outputs, dequantized])


def _run_calls(ctx: LayerContext, job: OwnerJob) -> None:
    for expert, calls in job.calls.items():
        module = job.experts[expert]
        for batch, args, kwargs in calls:
            ctx.batch, ctx.mask = batch, job.masks[batch]
            module(*args, **kwargs)
    ctx.batch, ctx.mask = -1, None


def solve_owned_experts(job: OwnerJob) -> OwnerResult:
    """Owner side of step B (module docstring): the expert groups solved in order as one process solves them,
    then the quantized experts' outputs per recorded call."""
    processor = job.processor
    ctx = LayerContext(job.layer_index, job.layer_name, nn.Module(), job.definition, None, job.total_tokens)
    processor.start_layer(ctx)
    per_group = []
    with torch.no_grad():
        for index, spec, members in job.groups:
            modules = [
                ResolvedModule(rel, full, get_submodule(job.experts[e], inner, what=f"expert {e} module"), e, key)
                for e, inner, rel, full, key in members
            ]
            group = ResolvedGroup(index, spec, modules, None, None, None)
            handles = list(processor.attach(ctx, group))
            handles += [m.module.register_forward_hook(TokenCountHook(ctx, m.full_name)) for m in modules]
            try:
                _run_calls(ctx, job)
            finally:
                for handle in handles:
                    handle.remove()
            mark_fallbacks(ctx, [group], job.policy, job.total_tokens)
            per_group.append(processor.process(ctx, group))
        processor.end_layer(ctx)
        outputs = {
            e: [job.experts[e](*args, **kwargs).detach() for _batch, args, kwargs in calls]
            for e, calls in job.calls.items()
        }
    return OwnerResult(per_group, dict(ctx.tokens), dict(ctx.fallback), outputs)


# -- the driver ----------------------------------------------------------------------------------------------


def expert_owners(experts: Sequence[int], workers: int) -> dict[int, int]:
    """Expert index -> owning worker: contiguous blocks of the experts in index order (module docstring)."""
    from .executor import shard_ranges

    ordered = sorted(experts)
    return {ordered[i]: w for w, (lo, hi) in enumerate(shard_ranges(len(ordered), workers)) for i in range(lo, hi)}


@dataclass
class ExpertLayer:
    """One layer's expert sharding plan: the expert groups, the container and the owners."""

    groups: list[ResolvedGroup]
    container: str
    experts: dict[int, nn.Module]
    owners: dict[int, int]
    block: str | None
    done: bool = False
    setup: dict[int, list[tuple[str, tuple[Any, ...]]]] = field(default_factory=dict)
    """Per worker, the calls that set up its stand-ins (re-sent to a replacement)."""

    def prefixes(self) -> tuple[str, ...]:
        return tuple(f"{self.container}.{e}." if self.container else f"{e}." for e in self.experts)

    def is_expert_key(self, key: str) -> bool:
        """Whether a state-dict key of the layer belongs to an expert (workers do not hold those)."""
        return key.startswith(self.prefixes())

    def worker_layer(self, layer: nn.Module) -> nn.Module:
        """A copy of ``layer`` with every expert module replaced by an :class:`ExpertStandIn` (one shared
        state); only the non-expert tensors are copied."""
        state = StandInState()
        memo = {id(module): ExpertStandIn(e, meta_copy(module), state) for e, module in self.experts.items()}
        return copy.deepcopy(layer, memo)

    def covers(self, unit: Sequence[ResolvedGroup]) -> bool:
        indices = {g.index for g in self.groups}
        return bool(unit) and all(g.index in indices for g in unit)


def plan_expert_layer(
    layer: nn.Module, groups: Sequence[ResolvedGroup], processor: Any, true_sequential: bool, workers: int
) -> tuple[ExpertLayer | None, str | None]:
    """The layer's :class:`ExpertLayer`, or None and why not (None, None: the layer has no expert groups)."""
    expert_groups = [g for g in groups if g.spec.is_expert_group]
    if not expert_groups:
        return None, None
    if not (getattr(processor, "shard_experts", False) and getattr(processor, "spread_solves", False)):
        return None, f"method {getattr(processor, 'method', type(processor).__name__)!r} does not shard experts"
    if not true_sequential:
        return None, "true_sequential=False (every group captured on the float layer at once)"
    positions = [groups.index(g) for g in expert_groups]
    if positions != list(range(positions[0], positions[0] + len(positions))):
        return None, "the expert groups are not consecutive"
    if any(m.expert is None for g in expert_groups for m in g.modules):
        return None, "an expert group also holds modules outside the experts"
    containers = {
        ".".join(name.split(".")[: name.split(".").index(EXPERT_WILDCARD)])
        for g in expert_groups
        for name in g.spec.modules
    }
    if len(containers) != 1:
        return None, f"the expert groups name several expert containers {sorted(containers)}"
    container = containers.pop()
    holder = get_submodule(layer, container, what="expert container") if container else layer
    if container == "" or not isinstance(holder, (nn.ModuleList, nn.ModuleDict)):
        return None, (
            f"expert container {container!r} ({type(holder).__name__}) is not an nn.ModuleList/ModuleDict "
            "(it may run its experts' linears itself)"
        )
    indices = sorted({m.expert for g in expert_groups for m in g.modules if m.expert is not None})
    experts = {e: holder._modules[str(e)] for e in indices}
    if any(module is None for module in experts.values()):
        return None, f"expert container {container!r} lacks a numbered expert"
    block = container.rpartition(".")[0] or None  # the MoE block: the capture stops after it returns
    plan = ExpertLayer(list(expert_groups), container, experts, expert_owners(indices, workers), block)
    return plan, None


def _expert(mod: ResolvedModule) -> int:
    if mod.expert is None:
        raise ExecutorError(f"module {mod.full_name}: expected an expert module")
    return mod.expert


def _inner(plan: ExpertLayer, mod: ResolvedModule) -> str:
    prefix = f"{plan.container}.{mod.expert}."
    if not mod.name.startswith(prefix):
        raise ExecutorError(f"module {mod.full_name}: expected it inside expert container {plan.container!r}")
    return mod.name[len(prefix) :]


def run_expert_groups(
    executor: Any, plan: ExpertLayer, ctx: LayerContext, processor: Any, policy: FallbackPolicy
) -> list[ModuleResult]:
    """Steps A, B and C for ``plan``'s groups on ``executor`` (a :class:`~qlooper.executor.ShardedExecutor`);
    returns their results in group order (each group's modules in order) with the weights installed."""
    if ctx.cache is None:
        raise ValueError("expert groups: the layer has no input cache")
    cache, key = ctx.cache, executor._key
    from .executor import _call_of, tensor_bytes

    # A: record every expert call, token-sharded
    ranges = executor._every_worker_ranges(len(cache))
    changed = executor._changed(ctx.layer)
    per_worker = [
        (key, changed, record_expert_calls, ([_call_of(cache, b) for b in range(lo, hi)], plan.block))
        for lo, hi in ranges
    ]
    recorded = executor._timed_calls("run_on_layer", per_worker, f"expert capture of layer {ctx.name}")
    calls: dict[int, list[Recorded]] = {e: [] for e in plan.experts}
    origin: dict[int, list[tuple[int, str]]] = {e: [] for e in plan.experts}  # (recording worker, fingerprint)
    for worker, ((lo, _hi), records) in enumerate(zip(ranges, recorded, strict=True)):
        for position, expert, args, kwargs, fp in records:
            calls[expert].append((lo + position, args, kwargs))
            origin[expert].append((worker, fp))

    # B: each owner solves its experts
    members = [
        (g.index, g.spec, [(_expert(m), _inner(plan, m), m.name, m.full_name, m.input_key) for m in g.modules])
        for g in plan.groups
    ]
    jobs = []
    for owner in range(max(plan.owners.values()) + 1):
        mine = [e for e in plan.experts if plan.owners[e] == owner]
        batches = sorted({b for e in mine for b, _a, _k in calls[e]})
        job = OwnerJob(
            ctx.index,
            ctx.name,
            ctx.definition,
            _fresh(processor),
            [(i, spec, [m for m in ms if m[0] in mine]) for i, spec, ms in members],
            {e: plan.experts[e] if executor.serializes_calls else copy.deepcopy(plan.experts[e]) for e in mine},
            {e: calls[e] for e in mine},
            {b: cache.token_masks[b] for b in batches},
            policy,
            ctx.total_tokens,
        )
        jobs.append((solve_owned_experts, (job,)))
    answers = executor.run_owner_jobs(jobs, f"expert solves of layer {ctx.name}")
    by_name: dict[str, ModuleResult] = {}
    tables: list[dict[tuple[int, str], torch.Tensor]] = [{} for _ in range(executor.workers)]
    for answer in answers:
        ctx.tokens.update(answer.tokens)
        ctx.fallback.update(answer.fallback)
        by_name.update({r.name: r for results in answer.results for r in results})
        for expert, outs in answer.outputs.items():
            for (worker, fp), out in zip(origin[expert], outs, strict=True):
                tables[worker][(expert, fp)] = out
    solved = []
    for group in plan.groups:
        for mod in group.modules:
            result = by_name[mod.full_name]
            replace_weight(mod.module, result.result.dequantized)
            solved.append(result)

    # C: each worker gets the outputs of the calls it recorded
    setup: list[tuple[Any, ...]] = [(key, {}, set_expert_outputs, (table,)) for table in tables]
    executor._call("run_on_layer", setup, f"expert outputs of layer {ctx.name}")
    plan.setup = {w: [("run_on_layer", args)] for w, args in enumerate(setup)}
    executor.times[-1].expert_bytes += tensor_bytes(tables)
    plan.done = True
    return solved


def _fresh(processor: Any) -> Any:
    """A shallow copy of ``processor`` for an owner (its per-layer state starts empty there)."""
    clone = copy.copy(processor)
    if hasattr(clone, "_tasks"):
        clone._tasks = {}
    return clone


def describe_plan(plan: ExpertLayer | None, reason: str | None, workers: int) -> dict[str, Any] | None:
    """One layer's row for the executor's ``describe()``: sharded (experts per owner) or why not."""
    if plan is None:
        return None if reason is None else {"sharded": False, "reason": reason}
    per_owner = [sorted(e for e, w in plan.owners.items() if w == owner) for owner in range(workers)]
    return {"sharded": True, "container": plan.container, "experts_by_worker": per_owner}


def log_unsharded(layer: str, reason: str) -> None:
    log.info("layer %s: MoE experts token-sharded (%s)", layer, reason)
