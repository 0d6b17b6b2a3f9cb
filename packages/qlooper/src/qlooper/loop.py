"""The layer-by-layer loop: capture, per-group statistics and solves, replay, finalizers, boundaries.

For each planned layer (from the start cursor an extension may restore):

0. extensions start (a checkpoint may restore state and a cursor); first-layer inputs are captured
   unless restored;
1. the layer loader (``LoopOptions.layer_loader``, :mod:`qlooper.layer_loader`) loads the layer; bind the
   definition's groups to the layer; ``processor.start_layer``;
2. per calculation group (or all groups at once with ``true_sequential=False``): the processor's hooks,
   the loop's token counters and an early-stop hook after the group's last module are installed, every
   cached batch is forwarded, the fallback policy marks under-covered modules, ``processor.process``;
3. ``processor.end_layer``; a forward replay of the quantized layer produces the next layer's inputs;
   extensions see the solved layer (``on_layer_done``);
4. finalizers (pack → offload → replace) are submitted to the worker pool; extensions see the boundary;
   the layer loader releases each layer whose finalizers are done (in layer order; the rest at the end).
   Before a layer starts, the finalizers of every layer before the previous one are waited for (at most one
   layer's finalizers run behind the loop; a failed one stops the run there).

Weight-only processors (``needs_calibration = False``) skip capture, hooks and replay.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import torch
from qalgos.fallback import FallbackPolicy
from qformats.layouts.registry import get_layout
from torch import nn

from .allocator import pin_mmap_threshold, release_free_memory
from .calibration import CalibrationSet
from .capture import capture_first_layer_inputs
from .coverage import mark_fallbacks
from .definition import ModelDefinition, ResolvedGroup, get_submodule, resolve_groups, resolve_layers
from .devices import resolve_compute_dtype, resolve_device
from .errors import ProcessorError
from .executor import InProcessExecutor
from .finalize import FinalizedModule, finalize_module
from .huge_pages import HUGE_PAGE_ENV, huge_pages_requested
from .input_cache import InputCache
from .layer_loader import LayerLoader, call_loader
from .lockstep import auto_budget, lockstep_forward, lockstep_supported, parked_bytes
from .placement import LayerPlacement
from .plan import LoopContext, LoopExtensions, LoopPlan, LoopStep
from .processors.base import LayerContext, ModuleResult, ObservingProcessor, Processor, tokens_in
from .report import ModuleReport, Progress, notes_text
from .worker_statistics import TokenCountHook

logger = logging.getLogger(__name__)

ReplaceModule = Callable[[str, nn.Module, FinalizedModule], "nn.Module | None"]


@dataclass
class LoopOptions:
    """How the loop runs.

    * ``true_sequential``: one capture forward per calculation group (later groups see earlier groups'
      quantized weights); ``False`` captures every group of a layer in one forward on the float layer.
    * ``early_stop``: end each capture forward after the group's last module (dense groups only).
    * ``lockstep``: with ``true_sequential``, a processor that can ``observe`` and groups that each read one
      input, run each layer as one lockstep forward (:mod:`qlooper.lockstep`: same numbers, one forward
      per layer instead of one per group plus a replay; every batch's activations live at once).
    * ``lockstep_budget``: bytes the parked activations of a lockstep forward may take
      (:func:`qlooper.lockstep.parked_bytes`); a layer over it runs the per-group forwards instead (same
      numbers, more forward time), logged and listed in ``LoopState.lockstep_skipped``. ``"auto"`` (the
      default): :func:`qlooper.lockstep.auto_budget`, the bytes of the model's tensors outside its decoder
      layers plus its largest layer, at least 512 MiB. None: no limit.
    * ``finalizer_workers``: threads packing/offloading/replacing finished modules.
    * ``pack_dtype``: word dtype passed to the layout's ``pack``.
    * ``offload_dir``: write each finished module to ``<dir>/<module name>/module.safetensors`` and drop it
      from memory.
    * ``replace_module``: ``(full name, dense module, finalized) -> new module | None``, called on a worker
      after the layer's replay; a returned module replaces the dense one in the model.
    * ``fallback``: qalgos ``FallbackPolicy`` for modules that saw too few tokens (MoE experts).
    * ``progress``: print a progress bar with time estimates to stderr.
    * ``cache_device``: where captured layer inputs are stored (the replayed outputs go back there).
    * ``device``: where each calibrated layer computes (:mod:`qlooper.placement`): the layer is moved there for
      its forwards and statistics (GPTQ's Hessian accumulates on it) and moved back when done; a name or
      ``torch.device`` checked by :func:`qlooper.devices.resolve_device` before any work. None: the layers
      compute where they are (the default; nothing is moved).
    * ``compute_dtype``: the dtype of the layer forwards (``"float32"``, ``"bfloat16"``, ``"float16"`` or a
      ``torch.dtype``; None: float32, the layer's own dtypes, nothing cast). Statistics and solves stay
      float32 and solves read the source weights (:class:`~qlooper.placement.LayerPlacement`); the numbers
      change with it, so a compute dtype other than float32 is part of checkpoint identity. Only processors
      with ``supports_compute_dtype = True`` (GPTQ) and the in-process executor take one.
    * ``extensions``: objects with optional ``on_start(context)``/``on_boundary(boundary)`` called by the loop.
    * ``executor``: where forwards and solves run (:mod:`qlooper.executor`); None is the in-process
      :class:`~qlooper.executor.InProcessExecutor`. A sharded executor (e.g. ``qlooper.ray_executor``) gives
      the same numbers; lockstep is in-process only (sharded runs use the per-group forwards).
    * ``source_identity``: a caller's fingerprint of the source weights for checkpoint identity (e.g. sha256
      of the checkpoint files); when None the model's parameters and buffers are hashed before quantizing.
    * ``layer_loader``: a :class:`~qlooper.layer_loader.LayerLoader` whose ``load`` runs before each layer
      is worked on and ``release`` after it is finished (e.g. weights read from disk layer by layer); a
      failing call stops the loop with a ``LayerLoadError`` naming the layer. None: the layers are in memory.
    """

    true_sequential: bool = True
    early_stop: bool = True
    lockstep: bool = True
    lockstep_budget: int | Literal["auto"] | None = "auto"
    finalizer_workers: int = 2
    pack_dtype: str = "int32"
    offload_dir: str | Path | None = None
    replace_module: ReplaceModule | None = None
    fallback: FallbackPolicy = field(default_factory=FallbackPolicy)
    progress: bool = False
    cache_device: str = "cpu"
    device: str | torch.device | None = None
    compute_dtype: str | torch.dtype | None = None
    extensions: tuple[Any, ...] = ()
    source_identity: str | None = None
    executor: Any = None
    layer_loader: LayerLoader | None = None


def _wait_and_raise(futures: Sequence[Future[Any]]) -> None:
    """Wait for every one of ``futures``, then raise the first error among them (in their order)."""
    wait(futures)
    for fut in futures:
        error = fut.exception()
        if error is not None:
            raise error


@dataclass
class LoopState:
    """Everything the loop has produced so far (what a checkpoint captures and restores)."""

    plan: LoopPlan
    layers: list[tuple[str, nn.Module]]
    cache: InputCache | None
    finalized: dict[str, FinalizedModule] = field(default_factory=dict)
    reports: list[ModuleReport] = field(default_factory=list)
    cursor: int = 0
    start_cursor: int = 0
    lockstep_skipped: dict[str, str] = field(default_factory=dict)


class LayerLoop:
    """Runs one processor over every planned layer of ``model`` (see the module docstring)."""

    def __init__(
        self,
        model: nn.Module,
        definition: ModelDefinition,
        processor: Processor,
        *,
        format: str,
        options: LoopOptions,
        extensions: Sequence[Any] = (),
    ) -> None:
        self.pack = getattr(processor, "pack", None)  # a processor may pack its own logical weights
        if self.pack is None:
            get_layout(format)  # fail before any work on an unknown format (and load layouts on this thread)
        self.model = model
        self.definition = definition
        self.processor = processor
        self.format = format
        self.options = options
        self.extensions = LoopExtensions(list(extensions))
        layers = resolve_layers(model, definition)
        plan = LoopPlan(tuple(LoopStep("layer", i, name) for i, (name, _) in enumerate(layers)))
        self.state = LoopState(plan=plan, layers=layers, cache=None)
        self.total_tokens = 0
        self._auto_budget: int | None = None
        self._placement = LayerPlacement(nn.Module(), None, None)  # the current layer's (set per layer)
        self.executor = options.executor if options.executor is not None else InProcessExecutor()
        self.device = resolve_device(options.device, argument="device") if options.device is not None else None
        self.compute_dtype = resolve_compute_dtype(options.compute_dtype, argument="compute_dtype")
        self._check_placement()

    def _check_placement(self) -> None:
        """Refuse, before any work, a compute dtype the processor or a device the executor cannot take."""
        moved = self.device is not None or self.compute_dtype != torch.float32
        if moved and not isinstance(self.executor, InProcessExecutor):
            raise ProcessorError(
                f"device={self.device} / compute_dtype={self.compute_dtype}: only the in-process executor moves or "
                f"casts layers; executor {getattr(self.executor, 'name', type(self.executor).__name__)!r} runs them "
                "where they are (leave device and compute_dtype unset with it)"
            )
        if self.compute_dtype != torch.float32 and not getattr(self.processor, "supports_compute_dtype", False):
            raise ProcessorError(
                f"compute_dtype={str(self.compute_dtype).removeprefix('torch.')}: method "
                f"{self.processor.method!r} runs its layer forwards in the model's dtype only (a compute dtype "
                "is supported by gptq)"
            )

    def run(self, calibration: CalibrationSet | None) -> LoopState:
        """Start extensions, capture (when needed), process every step from the cursor, wait for finalizers.

        The model runs in eval mode (dropout off) and its training flag is restored afterwards.
        """
        was_training = self.model.training
        self.model.eval()
        try:
            return self._run(calibration)
        finally:
            self.model.train(was_training)

    def _run(self, calibration: CalibrationSet | None) -> LoopState:
        state = self.state
        pin_mmap_threshold()  # large tensors in their own mappings: peak memory flat in depth (qlooper.allocator)
        if not huge_pages_requested():  # values are the same either way; only page faults cost more
            logger.info(
                "torch's CPU tensors use 4 KiB pages: set %s=1 before torch's first tensor (the lowbit command does) "
                "for fewer page faults (qlooper.huge_pages)",
                HUGE_PAGE_ENV,
            )
        if self.processor.needs_calibration:
            if calibration is None:
                raise ProcessorError(f"method {self.processor.method!r} needs calibration data; none was given")
            self.total_tokens = calibration.total_tokens
        cursor = self.extensions.start(LoopContext(state.plan, self.model, [self.processor], state))
        if self.processor.needs_calibration and state.cache is None and calibration is not None:
            state.cache = capture_first_layer_inputs(
                self.model,
                state.layers[0][1],
                calibration,
                device=self.options.cache_device,
                layers=[layer for _, layer in state.layers],
                output_arity=self.definition.layer_output_arity,
            )
        state.cursor = state.start_cursor = cursor
        progress = Progress(len(state.plan), enabled=self.options.progress)
        progress.start(cursor)
        offload = Path(self.options.offload_dir) if self.options.offload_dir is not None else None
        finished: list[tuple[int, list[Future[Any]]]] = []  # layers to release once their finalizers are done
        with ThreadPoolExecutor(max_workers=max(1, self.options.finalizer_workers)) as pool:
            try:
                for position in range(cursor, len(state.plan)):
                    self._bound_lag(finished, position)
                    step = state.plan.steps[position]
                    futures = self._run_layer(position, step, pool, offload)
                    finished.append((position, futures))
                    state.cursor = position + 1
                    self.extensions.publish(step, position + 1, futures)
                    self._raise_failed()
                    self._release_finished(finished)
                    progress.advance(step.name)
                self._wait_all()
                self._release_finished(finished)
            except BaseException:
                for fut in self.extensions.pending():
                    fut.cancel()
                wait(self.extensions.pending())
                raise
        return state

    def _release_finished(self, finished: list[tuple[int, list[Future[Any]]]]) -> None:
        """``layer_loader.release`` for the leading layers of ``finished`` whose finalizers all succeeded (in
        layer order; a layer waits for the ones before it); removes them from ``finished``."""
        loader = self.options.layer_loader
        while finished:
            position, futures = finished[0]
            if not all(f.done() and not f.cancelled() and f.exception() is None for f in futures):
                return
            finished.pop(0)
            if loader is not None:
                name, layer = self.state.layers[position]
                call_loader(loader, "release", position, name, layer)

    def _bound_lag(self, finished: list[tuple[int, list[Future[Any]]]], position: int) -> None:
        """Before layer ``position`` starts, wait for the finalizers of every layer before ``position - 1`` and raise
        the first error among them: at most one layer's finalizers run behind the loop, so a finalizer that
        fails (a full disk while replacing or spilling) stops the run within one layer, whatever the timing,
        and finished layers never pile up in memory waiting for their finalizers."""
        lagging = [f for done_at, futures in finished if done_at < position - 1 for f in futures]
        if lagging:
            _wait_and_raise(lagging)
            self._release_finished(finished)

    def _raise_failed(self) -> None:
        pending = self.extensions.pending()
        if any(f.done() and not f.cancelled() and f.exception() is not None for f in pending):
            self._wait_all()

    def _wait_all(self) -> None:
        _wait_and_raise(self.extensions.pending())

    def _units(self, groups: list[ResolvedGroup]) -> list[list[ResolvedGroup]]:
        return [[g] for g in groups] if self.options.true_sequential else [groups]

    def _stop_module(self, unit: list[ResolvedGroup]) -> nn.Module | None:
        last = unit[-1]
        if not self.options.early_stop or last.spec.is_expert_group or not last.modules:
            return None
        return last.modules[-1].module

    def _capture(self, ctx: LayerContext, unit: list[ResolvedGroup]) -> None:
        handles = []
        try:
            for group in unit:
                handles += self.processor.attach(ctx, group)
            for group in unit:
                for mod in group.modules:
                    handles.append(mod.module.register_forward_hook(TokenCountHook(ctx, mod.full_name)))
            self.executor.capture(ctx, self._stop_module(unit))
        finally:
            for handle in handles:
                handle.remove()
        self._mark_fallbacks(ctx, unit)

    def _mark_fallbacks(self, ctx: LayerContext, unit: list[ResolvedGroup]) -> None:
        """Raise on a dense module that saw no token; mark under-covered modules for the fallback policy."""
        mark_fallbacks(ctx, unit, self.options.fallback, self.total_tokens)

    def _lockstep(self, name: str, groups: list[ResolvedGroup]) -> bool:
        usable = (
            self.options.lockstep
            and self.executor.supports_lockstep
            and self.options.true_sequential
            and self.processor.needs_calibration
            and self.state.cache is not None
            and callable(getattr(self.processor, "observe", None))
            and lockstep_supported(groups) is None
        )
        if not usable or self.options.lockstep_budget is None or self.state.cache is None:
            return usable
        budget = self._lockstep_budget()
        need = parked_bytes(self.state.cache, groups)
        if need <= budget:
            return True
        reason = f"parked activations {need / 2**20:.0f} MiB > lockstep budget {budget / 2**20:.0f} MiB"
        logger.info("layer %s: per-group forwards (%s)", name, reason)
        self.state.lockstep_skipped[name] = reason
        return False

    def _lockstep_budget(self) -> int:
        """``LoopOptions.lockstep_budget`` in bytes (``"auto"`` resolved once, from the model's sizes)."""
        budget = self.options.lockstep_budget
        if budget == "auto":
            if self._auto_budget is None:
                self._auto_budget = auto_budget(self.model, [layer for _, layer in self.state.layers])
            return self._auto_budget
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            raise ValueError(f"lockstep_budget: expected bytes (int >= 0), 'auto' or None, found {budget!r}")
        return budget

    def _run_lockstep(self, ctx: LayerContext, groups: list[ResolvedGroup], solved: list[ModuleResult]) -> InputCache:
        """One lockstep forward of the layer (see :mod:`qlooper.lockstep`); returns the next layer's cache."""
        cache = self.state.cache
        if cache is None:
            raise ProcessorError(f"layer {ctx.name}: lockstep forward without an input cache")

        observing = cast(ObservingProcessor, self.processor)  # _lockstep checked it has observe()

        def observe(group: ResolvedGroup, batch: int, x: torch.Tensor) -> None:
            ctx.batch, ctx.mask = batch, cache.token_masks[batch].to(x.device)
            seen = tokens_in(ctx.mask, x)
            for mod in group.modules:
                ctx.tokens[mod.full_name] = ctx.tokens.get(mod.full_name, 0) + seen
            observing.observe(ctx, group, x)

        def solve(group: ResolvedGroup) -> None:
            ctx.batch, ctx.mask = -1, None
            release_free_memory()  # the forwards' freed temporaries, before the solve's large matrices
            self._mark_fallbacks(ctx, [group])
            with self._placement.solving(group.modules):
                solved.extend(self.processor.process(ctx, group))
            release_free_memory()  # the solve's freed work matrices, before the batches resume

        return lockstep_forward(ctx.layer, cache, groups, observe, solve)

    def _plan_experts(self, ctx: LayerContext, groups: list[ResolvedGroup], lockstep: bool) -> Any:
        """An executor's expert sharding plan for this layer (``plan_experts``; :mod:`qlooper.expert_shards`),
        or None: the in-process executor, a lockstep layer, or a layer whose experts it token-shards."""
        plan = getattr(self.executor, "plan_experts", None)
        if plan is None or lockstep or self.state.cache is None:
            return None
        return plan(ctx, groups, self.processor, self.options.true_sequential)

    def _run_layer(
        self, position: int, step: LoopStep, pool: ThreadPoolExecutor, offload: Path | None
    ) -> list[Future[Any]]:
        state = self.state
        name, layer = state.layers[position]
        loader = self.options.layer_loader
        if loader is not None:
            call_loader(loader, "load", position, name, layer)
        if state.cache is not None:
            state.cache = state.cache.for_layer(position)  # this layer's kwargs (its type's mask)
        ctx = LayerContext(position, name, layer, self.definition, state.cache, self.total_tokens)
        ctx.solve_map = self.executor.solve_map
        groups = resolve_groups(layer, name, self.definition)
        modules = {m.full_name: m for g in groups for m in g.modules}
        solved: list[ModuleResult] = []
        lockstep = self._lockstep(name, groups)
        placement = LayerPlacement(layer, self.device, self.compute_dtype)
        self._placement = placement
        with torch.no_grad():
            self.processor.start_layer(ctx)
            if self.processor.needs_calibration:
                placement.enter()  # after start_layer: a processor may read the layer as loaded there
            try:
                experts = None
                if self.processor.needs_calibration:
                    experts = self._plan_experts(ctx, groups, lockstep)
                    self.executor.begin_layer(position, name, layer)
                if lockstep:
                    state.cache = self._run_lockstep(ctx, groups, solved)
                else:
                    for unit in self._units(groups):
                        if experts is not None and experts.covers(unit):  # sharded over their owners
                            run_experts = cast(Any, self.executor).run_experts
                            solved += run_experts(ctx, unit, self.processor, self.options.fallback)
                            continue
                        if self.processor.needs_calibration:
                            self._capture(ctx, unit)
                        for group in unit:
                            with placement.solving(group.modules):
                                solved += self.processor.process(ctx, group)
                with placement.solving(list(modules.values())):
                    solved += self.processor.end_layer(ctx)
                if self.processor.needs_calibration and state.cache is not None and not lockstep:
                    state.cache = self.executor.replay(layer, state.cache)
            finally:
                placement.exit()
        for ext in self.extensions.extensions:  # the solved dense layer, before finalizers replace modules
            hook = getattr(ext, "on_layer_done", None)
            if hook is not None:
                hook(step, layer)
        release_free_memory()
        futures = []
        for result in solved:
            mod = modules[result.name]
            row = self._report_row(result, ctx)
            state.reports.append(row)
            futures.append(pool.submit(self._finalize, result, mod.module, layer, mod.name, row, offload))
        return futures

    def _report_row(self, result: ModuleResult, ctx: LayerContext) -> ModuleReport:
        res = result.result
        return ModuleReport(
            layer=result.layer,
            module=result.name,
            method=result.method,
            format=self.format,
            bits=getattr(res.weight, "bits", None),
            group_size=getattr(res.weight, "group_size", None),
            loss=float(res.loss) if res.loss is not None else None,
            tokens=ctx.tokens.get(result.name, result.tokens),
            damp=getattr(res, "damp", None),
            expert=result.expert,
            fallback=result.fallback,
            fallback_reason=result.fallback_reason,
            seconds=result.seconds,
            notes=notes_text(result.notes),
        )

    def _finalize(
        self,
        result: ModuleResult,
        module: nn.Module,
        layer: nn.Module,
        rel: str,
        row: ModuleReport,
        offload: Path | None,
    ) -> FinalizedModule:
        replace = None
        if self.options.replace_module is not None:
            replace_fn = self.options.replace_module

            def replace(done: FinalizedModule) -> None:
                new = replace_fn(result.name, module, done)
                if new is not None:
                    install_module(layer, rel, new)

        done = finalize_module(
            result,
            module,
            format=self.format,
            pack_dtype=self.options.pack_dtype,
            offload_dir=offload,
            replace=replace,
            pack=self.pack,
        )
        row.finalize_seconds = done.seconds
        self.state.finalized[result.name] = done
        return done


def install_module(layer: nn.Module, rel: str, new: nn.Module) -> None:
    """Put ``new`` at dotted path ``rel`` inside ``layer``."""
    parent_path, _, leaf = rel.rpartition(".")
    parent = get_submodule(layer, parent_path, what="module parent") if parent_path else layer
    setattr(parent, leaf, new)
