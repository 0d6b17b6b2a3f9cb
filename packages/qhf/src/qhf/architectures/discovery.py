"""Model definitions discovered from the model itself: one traced forward per distinct layer structure.

Where discovery runs (decided for the lazy skeleton): decoder layers of an opened source stay on the meta
device until the loop starts them, and discovery must not read weights nor wait for calibration. So it
works on a *replica*: a deep copy of the meta skeleton in which one layer per distinct structure (same
module names, classes and parameter shapes; e.g. DeepSeek's dense first layers vs its MoE layers) gets
random weights (seeded, so discovery is deterministic); the other layers up to the last representative
point at the replica of their structure. The parameters outside the layers that the forward may read
(position embeddings, embedding norms, token-type embeddings; never the vocabulary-sized embedding and
output projection) get seeded random values too (:mod:`qhf.architectures.outside_layers`). The replica
model runs once on random ``inputs_embeds``
``[1, 16, hidden]`` (so the model's own code builds the masks and rotary embeddings each layer gets) and
stops after the last representative layer. Cost: one layer's parameters per structure, the non-vocabulary
parameters outside the layers, a 16-token forward.

Each representative layer is traced (:mod:`qhf.architectures.layer_trace`) and turned into groups
(:mod:`qhf.architectures.layer_groups`); structures are merged into one qlooper ``ModelDefinition``: a group
missing from some structure is ``optional``. Fused 3-D experts are unfused first
(:mod:`qhf.architectures.fused_experts`) and each unfused block is checked against the fused forward on the
random weights. Anything not understood raises :class:`~qhf.errors.UnsupportedArchitectureError` naming
the part of the layer, before any work; so is a model that calls a decoder layer twice in one forward (a
looped model, :mod:`qhf.architectures.layer_calls`).
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field, replace
from typing import Any, cast

import torch
from qalgos.awq_clip import clip_allowed
from qlooper.definition import GroupSpec, ModelDefinition
from qlooper.errors import DefinitionError
from qlooper.module_access import linear_features
from torch import nn

from ..errors import UnsupportedArchitectureError
from .discovery_inputs import embeds_inputs, ids_inputs, use_id_embedding, vocab_size
from .fused_experts import UnfusedExperts
from .layer_calls import check_layers_run_once
from .layer_groups import FoundGroup, LayerStructure, layer_structure
from .layer_list import find_layer_list
from .layer_outputs import check_not_carried, probe_layer_outputs
from .layer_trace import trace_layer
from .multimodal import text_config
from .outside_layers import randomize_outside

log = logging.getLogger(__name__)

DISCOVERY_TOKENS = 16
"""Tokens of the discovery forward (one row)."""


@dataclass
class Discovery:
    """A discovered definition and its account: the layers' structures (representative index -> layers),
    per structure what was found, linears kept dense and why, groups without a previous op and why;
    ``outside``: the parameters outside the layers the replica gave random values
    (:func:`qhf.architectures.outside_layers.outside_parameters`);
    ``layers_field``: the config field that counts the decoder layers (``num_hidden_layers``, or e.g.
    ``decoder_layers`` for an encoder-decoder's decoder: :mod:`qhf.architectures.layer_list`)."""

    definition: ModelDefinition
    layer_structures: dict[int, list[int]]
    structures: dict[int, LayerStructure]
    notes: dict[str, str] = field(default_factory=dict)
    outside: tuple[str, ...] = ()
    layers_field: str = "num_hidden_layers"


class _Stop(Exception):
    """Ends the discovery forward after the last representative layer."""


def find_layers(model: nn.Module, config: Any) -> str:
    """Dotted path of the decoder-layer ``nn.ModuleList`` (:func:`qhf.architectures.layer_list.find_layer_list`)."""
    return find_layer_list(model, config).path


def _signature(layer: nn.Module) -> tuple[Any, ...]:
    return tuple(
        (
            name,
            type(module).__name__,
            tuple((p, tuple(t.shape)) for p, t in module._parameters.items() if t is not None),
        )
        for name, module in layer.named_modules()
    )


def randomize_parameters(module: nn.Module, generator: torch.Generator, *, recurse: bool = True) -> None:
    """Give every meta parameter of ``module`` (and, with ``recurse``, of its submodules) a real random value in its
    dtype: float32 ``N(0, 0.05²)`` draws, norm-like 1-D weights near 1."""
    for sub in module.modules() if recurse else (module,):
        for pname, param in list(sub._parameters.items()):
            if param is None or param.device.type != "meta":
                continue
            value = torch.randn(param.shape, generator=generator, dtype=torch.float32) * 0.05
            if param.dim() <= 1 and pname == "weight":
                value = value + 1.0
            sub._parameters[pname] = nn.Parameter(value.to(param.dtype), requires_grad=False)


def _check_unfused(layer: nn.Module, where: str, generator: torch.Generator) -> None:
    """Each unfused experts block gives the fused module's output on random routing (same weights)."""
    for name, module in layer.named_modules():
        if not isinstance(module, UnfusedExperts):
            continue
        fused = copy.copy(module._gate_owner)
        fused._parameters = dict(fused._parameters)
        for rel, where_in in module.slices.items():
            fused_tensor = fused._parameters.get(where_in.fused_name)
            if fused_tensor is None:
                fused_tensor = nn.Parameter(
                    torch.zeros(module.fused_shapes[where_in.fused_name], dtype=module.dtype), requires_grad=False
                )
                fused._parameters[where_in.fused_name] = fused_tensor
            where_in.put(fused_tensor, module.get_parameter(rel).detach())
        # the fused module's own other tensors (a post-expert norm, per-expert scales) get random values too
        randomize_parameters(fused, generator)
        hidden = linear_features(module.get_submodule("0.down_proj"))[1]
        inputs = module.sample_inputs(DISCOVERY_TOKENS, hidden, generator)
        with torch.no_grad():
            expected = fused(*inputs)
            got = module(*inputs)
        if not torch.allclose(expected.float(), got.float(), atol=1e-4, rtol=1e-3):
            raise UnsupportedArchitectureError(
                f"{where}.{name}: fused experts ({type(module._gate_owner).__name__}) do not compute a per-expert "
                f"MLP this toolkit can unfuse (max difference {(expected - got).abs().max().item():.3g})"
            )


def _traced_forward(
    replica: nn.Module, real: dict[int, nn.Module], inputs: dict[str, Any]
) -> tuple[dict[int, Any], Exception | None]:
    """One forward of ``replica`` on ``inputs`` stopped after the last representative; each representative's
    trace, and the model's own error (None when it ran)."""
    traces: dict[int, Any] = {}
    contexts = {rep: trace_layer(layer) for rep, layer in real.items()}

    def stop(_m: nn.Module, _a: Any, _o: Any) -> None:
        raise _Stop

    handle = None
    failure: Exception | None = None
    try:
        for rep, ctx in contexts.items():
            traces[rep] = ctx.__enter__()
        handle = real[max(real)].register_forward_hook(stop)
        with torch.no_grad():
            replica(**inputs)
    except _Stop:
        pass
    except Exception as error:  # any failure of the model's own forward is reported as not understood
        failure = error
    finally:
        if handle is not None:
            handle.remove()
        for ctx in contexts.values():
            ctx.__exit__(None, None, None)
    return traces, failure


def _run_replica(
    skeleton: nn.Module, layers_path: str, representatives: dict[int, list[int]], config: Any
) -> tuple[nn.Module, dict[int, nn.Module], dict[int, Any], list[str], str | None]:
    """The replica model with real random representative layers and parameters outside the layers, each
    representative's trace after one forward, the names of the outside parameters made real, and None when the
    forward ran on ``inputs_embeds``, else why that failed (it then ran on token ids through a stand-in
    embedding: :mod:`qhf.architectures.discovery_inputs`)."""
    generator = torch.Generator().manual_seed(0)
    replica: Any = copy.deepcopy(skeleton)  # a transformers model
    # its own generator: the layers' and the inputs' draws stay those of a model with nothing outside to fill
    outside = randomize_outside(replica, layers_path, config, torch.Generator().manual_seed(2))
    container = cast(nn.ModuleList, replica.get_submodule(layers_path))
    real: dict[int, nn.Module] = {}
    for rep, members in representatives.items():
        layer = container[rep]
        randomize_parameters(layer, generator)
        _check_unfused(layer, f"{layers_path}.{rep}", generator)
        for index in members:
            container[index] = layer
        real[rep] = layer
    hidden = int(replica.get_input_embeddings().weight.shape[1])
    dtype = next(iter(real[max(real)].parameters())).dtype
    inputs = embeds_inputs(torch.randn(1, DISCOVERY_TOKENS, hidden, generator=generator).to(dtype))
    traces, failure = _traced_forward(replica, real, inputs)
    fell_back: str | None = None
    if failure is not None:
        first = failure
        use_id_embedding(replica, hidden, dtype)
        inputs = ids_inputs(vocab_size(config), DISCOVERY_TOKENS, torch.Generator().manual_seed(4))
        traces, failure = _traced_forward(replica, real, inputs)
        if failure is not None:
            raise UnsupportedArchitectureError(
                f"{type(skeleton).__name__}: the discovery forward (random weights, inputs_embeds [1, "
                f"{DISCOVERY_TOKENS}, {hidden}]) failed: {type(first).__name__}: {first}; on token ids "
                f"through a stand-in embedding: {type(failure).__name__}: {failure}"
            ) from first
        log.info(
            "%s: discovery ran on token ids (the inputs_embeds forward failed: %s: %s)",
            type(skeleton).__name__,
            type(first).__name__,
            first,
        )
        fell_back = f"{type(first).__name__}: {first}"
    missing = [rep for rep, trace in traces.items() if not trace.calls]
    if missing:
        raise UnsupportedArchitectureError(f"{layers_path}.{missing[0]}: the layer never ran in the discovery forward")
    return replica, real, traces, outside, fell_back


def _probe_inputs(replica: nn.Module, real: dict[int, nn.Module], on_ids: bool, config: Any) -> Any:
    """Inputs of the output probe, of the kind the discovery forward ran on: random ``inputs_embeds
    [1, DISCOVERY_TOKENS, hidden]`` in the layers' dtype, else random token ids."""
    if on_ids:
        return ids_inputs(vocab_size(config), DISCOVERY_TOKENS, torch.Generator().manual_seed(5))
    hidden = int(cast(Any, replica).get_input_embeddings().weight.shape[1])
    dtype = next(iter(real[max(real)].parameters())).dtype
    return torch.randn(1, DISCOVERY_TOKENS, hidden, generator=torch.Generator().manual_seed(1)).to(dtype)


def _merge(structures: dict[int, LayerStructure], where: str) -> list[GroupSpec]:
    """One group list for every structure: shared groups in order, the others optional, placed after their
    predecessor in their own structure."""
    merged: list[FoundGroup] = []
    present: dict[tuple[str, ...], int] = {}
    for structure in structures.values():
        after = -1
        for group in structure.groups:
            known = next((g for g in merged if g.modules == group.modules), None)
            if known is None:
                merged.insert(after + 1, group)
                after += 1
            else:
                if known != group:
                    raise UnsupportedArchitectureError(
                        f"{where}: group {list(group.modules)} differs between layer structures ({known} vs {group})"
                    )
                after = merged.index(known)
            present[group.modules] = present.get(group.modules, 0) + 1
    specs = []
    for group in merged:
        specs.append(
            GroupSpec(
                group.modules,
                prev_op=group.prev_op,
                inspect=group.inspect,
                optional=present[group.modules] < len(structures),
            )
        )
    return specs


def _offset(structures: dict[int, LayerStructure]) -> tuple[float, set[tuple[str, ...]]]:
    """The one norm offset of the definition and the groups whose norm disagrees (their prev op is dropped)."""
    offsets = [g.offset for s in structures.values() for g in s.groups if g.prev_op is not None]
    chosen = max(set(offsets), key=offsets.count) if offsets else 0.0
    dropped = {g.modules for s in structures.values() for g in s.groups if g.prev_op and g.offset != chosen}
    return chosen, dropped


def discover(skeleton: nn.Module, config: Any, *, name: str | None = None) -> Discovery:
    """The qlooper ``ModelDefinition`` of ``skeleton`` (see the module docstring)."""
    layer_list = find_layer_list(skeleton, config)
    layers_path = layer_list.path
    container = cast(nn.ModuleList, skeleton.get_submodule(layers_path))
    by_signature: dict[tuple[Any, ...], list[int]] = {}
    for index, layer in enumerate(container):
        by_signature.setdefault(_signature(layer), []).append(index)
    representatives = {members[0]: members for members in by_signature.values()}
    replica, real, traces, outside, fell_back = _run_replica(skeleton, layers_path, representatives, config)
    probe_inputs = _probe_inputs(replica, real, fell_back is not None, config)
    outputs = probe_layer_outputs(replica, layers_path, probe_inputs)
    check_not_carried(outputs, layers_path)
    check_layers_run_once(replica, layers_path, probe_inputs, outputs.arity)
    structures = {
        rep: layer_structure(real[rep], traces[rep], f"{layers_path}.{rep}") for rep in sorted(representatives)
    }
    specs = _merge(structures, layers_path)
    offset, dropped = _offset(structures)
    notes: dict[str, str] = {}
    for i, spec in enumerate(specs):
        if spec.modules in dropped:
            notes[spec.modules[0]] = f"prev_op {spec.prev_op} dropped: its norm offset differs from {offset}"
            specs[i] = replace(spec, prev_op=None)
    common_run_only = set.intersection(*(set(s.run_only) for s in structures.values()))
    run_only = [n for n in next(iter(structures.values())).run_only if n in common_run_only]
    quantized = [m for spec in specs for m in spec.modules]
    max_length = getattr(text_config(config), "max_position_embeddings", None)
    try:
        definition = ModelDefinition(
            layers_path=layers_path,
            groups=tuple(specs),
            unquantized=tuple(run_only),
            max_length=int(max_length) if max_length else None,
            awq_no_clip=tuple(m for m in quantized if not clip_allowed(m.rsplit(".", 1)[-1])),
            norm_weight_offset=offset,
            name=name or str(getattr(config, "model_type", "discovered")),
            layer_output_arity=outputs.arity,
        )
    except DefinitionError as error:
        raise UnsupportedArchitectureError(
            f"{layers_path}: the discovered groups do not form a definition: {error}"
        ) from error
    if fell_back is not None:
        notes["<inputs>"] = (
            f"discovery ran on token ids [1, {DISCOVERY_TOKENS}] through a stand-in embedding: the inputs_embeds "
            f"forward failed ({fell_back})"
        )
    if layer_list.field != "num_hidden_layers":
        notes[layers_path] = f"{layer_list.count} decoder layers counted by config field {layer_list.field!r}"
    return Discovery(definition, representatives, structures, notes, tuple(outside), layer_list.field)
