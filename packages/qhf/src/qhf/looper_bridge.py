"""Running qlooper on an opened source: processor, lazy layers, quantized-module replacement (the spec comes from
:mod:`qhf.spec_from_config`).

Decoder layers stay on the meta device until the loop starts them: :class:`SourceLayerLoader` (qlooper's
``LoopOptions.layer_loader``) materializes layer ``i`` from the source files before the loop works on it
(before any capture forward or weight-only solve), and each finished linear is replaced by a qkernels module
built from its packed tensors, which drops the dense weight. Peak memory is then the base modules, one dense
layer (a few while finalizers catch up), the calibration cache and the packed layers done so far.

Streaming (a :class:`~qhf.spill.SpillArea` given to the loader, ``QuantModel.quantize(keep_in_memory=False)``):
finished modules are not replaced; ``release`` writes the layer's modules and its other tensors to the spill
area and sends the layer back to meta. Peak memory is then flat in depth: the base modules, one dense layer
(a few while finalizers catch up) and the calibration cache.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .config_view import adapter, algorithm, awq_scales, is_weight_only, method_of, solver_variant
from .errors import QHFError
from .live_tensors import live_tensor
from .source.opened_source import OpenedSource
from .spill import SpillArea

if TYPE_CHECKING:
    from qformats.config import QuantizeConfig
    from qlooper.definition import ResolvedGroup
    from qlooper.finalize import FinalizedModule


def make_quant_processor(settings: QuantizeConfig, spec: Any, module_specs: dict[str, Any] | None = None) -> Any:
    """The qlooper processor for the config ``settings``: GPTAQ/FOEM when a ``gptaq`` / ``foem`` section is set,
    ``awq_gptq`` with ``awq_scales``, else the method's (``weight_only`` for FP8, bitsandbytes, GGUF); wrapped in
    qlooper's ``EoRAProcessor`` when the config asks for an ``adapter``. ``module_specs``: modules' own specs
    (:func:`qhf.spec_from_config.module_specs`; a method that cannot take them refuses them naming itself)."""
    from qlooper.processors.registry import make_processor

    variant = solver_variant(settings)
    if variant is not None:
        from qalgos.gptaq import AsymmetricSpec

        name, values = variant
        terms = AsymmetricSpec(name, values["alpha"], values.get("beta", 0.0))
        processor = make_processor(name, spec, terms, module_specs=module_specs)
    elif awq_scales(settings):
        processor = make_processor("awq_gptq", spec, module_specs=module_specs)
    else:
        method = "weight_only" if is_weight_only(settings) else algorithm(settings)
        processor = make_processor(method, spec, module_specs=module_specs)
    eora = adapter(settings)
    if eora is not None:
        from qlooper.processors.eora import EoRAProcessor

        processor = EoRAProcessor(processor, int(eora["rank"]))
    return processor


@dataclass
class SourceLayerLoader:
    """qlooper ``LayerLoader`` reading each decoder layer's weights from ``source``'s files when the loop starts it.

    The first ``load`` comes after the loop captured the first layer's inputs, so the modules outside the
    decoder layers (embeddings, final norm, lm_head) are released then; the caller materializes them again
    after the loop (:meth:`OpenedSource.materialize_base`). ``peak_layer_bytes``: the most bytes one layer read.

    Without ``spill``, ``release`` keeps the layer: it is part of the quantized model in memory (its linears
    already replaced by qkernels modules, its norms still needed). With ``spill`` (streaming), :meth:`collect`
    is the loop's ``replace_module`` (it records each finished module and replaces nothing) and ``release``
    spills the layer (:meth:`spill_layer`) and sends it back to meta.
    """

    source: OpenedSource
    spill: SpillArea | None = None
    peak_layer_bytes: int = 0
    base_released: bool = False
    finished: dict[str, FinalizedModule] = field(default_factory=dict)
    spilled_layers: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)  # finalizer threads add to finished

    def load(self, index: int, name: str, layer: nn.Module) -> None:
        expected = self.source.layer_prefix(index)
        if name != expected:
            raise QHFError(f"layer loader: the loop's layer {index} is {name!r}, the source's is {expected!r}")
        if not self.base_released:
            self.source.release_base()
            self.base_released = True
        loaded = self.source.materialize_layer(index)
        self.peak_layer_bytes = max(self.peak_layer_bytes, loaded)

    def release(self, index: int, name: str, layer: nn.Module) -> None:
        """Streaming: spill layer ``index`` and send it to meta; else nothing (class docstring)."""
        if self.spill is not None:
            self.spill_layer(index)

    def collect(self, name: str, dense: nn.Module, done: FinalizedModule) -> None:
        """The streaming run's ``replace_module``: record ``done`` (on a finalizer thread), replace nothing."""
        with self._lock:
            self.finished[name] = done

    def spill_layer(self, index: int) -> None:
        """Write layer ``index``'s finished modules and its other materialized tensors (compute dtype) to the
        spill area, drop the modules' arrays (qlooper ``FinalizedModule.spill``) and send the layer to meta."""
        if self.spill is None or index in self.spilled_layers:
            return
        prefix = self.source.layer_prefix(index) + "."
        with self._lock:
            modules = [done for module, done in self.finished.items() if module.startswith(prefix)]
        quantized = {f"{done.name}.weight" for done in modules}
        dense = {}
        for tensor_name in self.source.tensor_names():
            if tensor_name.startswith(prefix) and tensor_name not in quantized:
                value = live_tensor(self.source.model, tensor_name)
                if value is not None:
                    dense[tensor_name] = value
        self.spill.write_dense(prefix.rstrip("."), dense)
        for done in modules:
            done.spill(self.spill.modules_root)
        self.source.release_layer(index)
        self.spilled_layers.add(index)

    def spill_rest(self, modules: dict[str, FinalizedModule]) -> None:
        """After the run: record ``modules`` (a resumed run restores finished layers without the loader) and
        spill every layer not spilled yet."""
        if self.spill is None:
            return
        with self._lock:
            for name, done in modules.items():
                self.finished.setdefault(name, done)
        for index in range(self.source.num_layers):
            self.spill_layer(index)


def replacer_hooks(settings: QuantizeConfig, dtype: torch.dtype, adapter_for: Any = None) -> dict[str, Any]:
    """The keyword hooks of ``qlooper.kernels.kernel_replacer`` for ``settings``: ``pack_dtype``,
    ``family_options`` (the reading options of a non-integer family's module, :func:`qhf.weight_only.kernel_options`)
    and ``wrap`` (a :class:`~qhf.lora_adapter.LoraLinear` around the module when ``adapter_for(name)`` gives its
    EoRA adapter, its factors cast to ``dtype``)."""
    from .weight_only import kernel_options

    def family_options(name: str, done: Any) -> dict[str, Any]:
        return kernel_options(settings, name, done.weight)

    def wrap(name: str, module: nn.Module) -> nn.Module:
        adapter = adapter_for(name) if adapter_for is not None else None
        if adapter is None:
            return module
        from .lora_adapter import LoraLinear

        return LoraLinear(module, adapter.a.to(dtype), adapter.b.to(dtype))

    return {"pack_dtype": settings.pack_dtype, "family_options": family_options, "wrap": wrap}


def decoder_groups(source: OpenedSource) -> Iterator[tuple[int, list[ResolvedGroup]]]:
    """``(layer index, its resolved groups)`` for every decoder layer, bound to the skeleton's modules (from the
    layers' structure; nothing is materialized: a module's ``weight`` may be a meta tensor, shape only)."""
    from qlooper.definition import resolve_groups

    for index in range(source.num_layers):
        prefix = source.layer_prefix(index)
        yield index, resolve_groups(source.model.get_submodule(prefix), prefix, source.definition)


def layer_modules(source: OpenedSource) -> list[tuple[str, int]]:
    """``(full module name, layer index)`` of every quantized linear of every decoder layer (from the layers'
    structure; nothing is materialized)."""
    return [(m.full_name, index) for index, groups in decoder_groups(source) for g in groups for m in g.modules]


def refuse_negative_rules(settings: QuantizeConfig, source: OpenedSource) -> None:
    """Raise :class:`QHFError` naming the first decoder-layer module a negative ``dynamic`` rule would keep dense
    (and the rule), before any work (see :func:`preflight`)."""
    rules = settings.rules
    if rules is None or not any(rule.negative for rule in rules):
        return
    for name, _index in layer_modules(source):
        rule = rules.match(name)
        if rule is not None and rule.negative:
            raise QHFError(
                f"dynamic[{rule.key!r}] keeps {name} dense, but the layer loop quantizes every module of a decoder "
                "layer's groups (keeping single modules dense is not supported); remove the rule, or narrow it to "
                "modules outside the decoder layers"
            )


def preflight(settings: QuantizeConfig, source: OpenedSource) -> None:
    """Refuse, before any work, a format that cannot hold the model's shapes (names module and reason).

    Every distinct ``[out, in]`` of one decoder layer's quantized modules is asked of the method
    (:meth:`qhf.methods.QuantMethod.shape_problem`): a method whose weight family has a layout of its own asks the
    family (``WeightFamily.shape_problem``, :mod:`qformats.family_shapes`): weight-only methods hold any shape
    except FP8 block scaling (the block must divide ``[out, in]``); QQQ needs in/out divisible by 64 and no partial
    group; ParoQuant needs an even group size dividing every ``in_features`` (e.g. SmolLM2's 576 takes 64, not
    128). The integer layouts try a zero weight of the configured bits/group size against
    ``get_layout(format).cannot_represent`` (e.g. AWQ's GEMM layout needs ``in_features`` divisible by
    ``group_size``, while the GPTQ layouts hold a partial group).

    A negative ``dynamic`` rule (``-:pattern``) that names a decoder-layer module is refused too: the layer loop
    quantizes every module of its groups, so the module would be quantized and the checkpoint writer would refuse
    it at save (``CONFIG-EXCLUDED``), after the whole run. Rules naming modules outside the decoder layers (a
    vision tower) are kept.
    """
    from qlooper.definition import resolve_groups

    refuse_negative_rules(settings, source)
    method = method_of(settings)
    seen: set[tuple[int, int]] = set()
    modules = []
    for index in source.discovery.layer_structures:  # one layer of each structure
        prefix = source.layer_prefix(index)
        layer = source.model.get_submodule(prefix)
        modules += [m for g in resolve_groups(layer, prefix, source.definition) for m in g.modules]
    for resolved in modules:
        out_features, in_features = int(resolved.weight.shape[0]), int(resolved.weight.shape[1])
        if (out_features, in_features) in seen:
            continue
        seen.add((out_features, in_features))
        problem = method.shape_problem(settings, resolved.full_name, out_features, in_features)
        if problem is not None:
            raise QHFError(problem)
