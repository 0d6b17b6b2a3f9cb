"""Verifying a folded rotation on a float64 random replica of the model, before any work.

The replica is a deep copy of the meta skeleton in float64 in which one decoder layer per layer structure gets
random weights (:func:`qhf.architectures.discovery.randomize_parameters`); one forward on random
``inputs_embeds`` ``[1, 16, hidden]`` records the arguments each representative layer is called with (masks,
rotary embeddings). Then, with the plan's rewrites installed (:mod:`qhf.rotation.plan`, :mod:`qhf.rotation.fold`):

* per structure: ``layer'(x Q) == layer(x) Q`` (residual), ``layer'(x) == layer(x)`` (per-head value/output);
* residual only, outside the layers: a 32-row copy of the input embedding gives ``emb'(ids) == emb(ids) Q``, and
  with every decoder layer passing its input through, ``model'(inputs_embeds = X Q)`` gives ``model(X)``'s logits
  (the final norm folded into an 8-row stand-in of the output projection).

Each check passes when the largest difference is at most :data:`TOLERANCE` times the largest value: the replica
is float64, but transformers' RMS norms compute in float32 (``hidden.to(torch.float32)``), so a correct fold
differs by float32 rounding (~1e-7 relative) while a wrong one differs by the norm weights' spread (~5e-2 here).
A failure is a reason in words: the structure, the difference and the per-channel weights on the residual stream
the fold leaves alone (Gemma's sandwich norms, a LayerNorm's bias) or the error the forward raised.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
from qlooper.definition import ModelDefinition
from torch import nn

from ..architectures.discovery import DISCOVERY_TOKENS, randomize_parameters
from .fold import FoldedRotation
from .plan import AttentionShape, Plan, base_plan, final_norm, layer_plan, layer_roles

TOLERANCE = 1e-5
EMBED_ROWS = 32
HEAD_ROWS = 8


class _Stop(Exception):
    """Ends the capture forward at the last representative layer."""


@dataclass
class _Captured:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @property
    def hidden(self) -> torch.Tensor:
        return cast(torch.Tensor, self.args[0] if self.args else self.kwargs["hidden_states"])

    def call(self, layer: nn.Module, hidden: torch.Tensor) -> Any:
        kwargs = dict(self.kwargs)
        if self.args:
            return layer(hidden, *self.args[1:], **kwargs)
        kwargs["hidden_states"] = hidden
        return layer(**kwargs)


def _first(output: Any) -> torch.Tensor:
    return cast(torch.Tensor, output[0] if isinstance(output, tuple) else output)


def _difference(got: torch.Tensor, expected: torch.Tensor) -> float | None:
    """The largest difference when it is above tolerance, else None."""
    diff = float((got - expected).abs().max())
    return diff if diff > TOLERANCE * max(1.0, float(expected.abs().max())) else None


def _installed(module: nn.Module, values: dict[str, torch.Tensor]) -> dict[str, nn.Parameter | None]:
    """Put ``values`` (names relative to ``module``) in place of its parameters; returns the originals."""
    originals: dict[str, nn.Parameter | None] = {}
    for name, value in values.items():
        owner_name, _, pname = name.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        originals[name] = owner._parameters[pname]
        owner._parameters[pname] = nn.Parameter(value, requires_grad=False)
    return originals


def _restore(module: nn.Module, originals: dict[str, nn.Parameter | None]) -> None:
    for name, original in originals.items():
        owner_name, _, pname = name.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        owner._parameters[pname] = original


class ReplicaCheck:
    """The float64 replica of ``skeleton`` (a meta model) and its recorded layer calls (module docstring).

    ``layer_structures``: representative layer index -> the layers of its structure; ``embed_weight`` /
    ``head_weight``: full names; ``residual`` ``[hidden, hidden]`` and ``head`` ``[head_dim, head_dim]`` float64
    rotations (``head`` None without an attention shape); ``offset``: the norms' weight offset.
    """

    def __init__(
        self,
        skeleton: nn.Module,
        definition: ModelDefinition,
        layer_structures: dict[int, list[int]],
        embed_weight: str,
        head_weight: str,
        attention: AttentionShape | None,
        residual: torch.Tensor,
        head: torch.Tensor | None,
    ) -> None:
        self.definition = definition
        self.layers_path = definition.layers_path
        self.embed_weight, self.head_weight = embed_weight, head_weight
        self.attention = attention
        self.residual, self.head = residual, head
        self.hidden = int(residual.shape[0])
        self.generator = torch.Generator().manual_seed(0)
        self.replica: Any = copy.deepcopy(skeleton).to(torch.float64)
        container = cast(nn.ModuleList, self.replica.get_submodule(self.layers_path))
        self.layers: dict[int, nn.Module] = {}
        for rep, members in layer_structures.items():
            layer = container[rep]
            randomize_parameters(layer, self.generator)
            for index in members:
                container[index] = layer
            self.layers[rep] = layer
        self.capture_error: str | None = None
        self.calls: dict[int, _Captured] = {}
        self.tuple_output: dict[int, bool] = {}  # whether each representative layer returns a tuple
        self.embeds = torch.randn(1, DISCOVERY_TOKENS, self.hidden, generator=self.generator, dtype=torch.float64)
        self._capture()

    def _forward(self, embeds: torch.Tensor) -> Any:
        with torch.no_grad():
            return self.replica(
                inputs_embeds=embeds,
                attention_mask=torch.ones(1, embeds.shape[1], dtype=torch.long),
                use_cache=False,
            )

    def _capture(self) -> None:
        last = max(self.layers)
        handles = []

        def recorder(rep: int) -> Callable[..., None]:
            def record(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
                self.calls.setdefault(rep, _Captured(args, dict(kwargs)))
                if rep == last:
                    raise _Stop

            return record

        for rep, layer in self.layers.items():
            handles.append(layer.register_forward_pre_hook(recorder(rep), with_kwargs=True))
        try:
            self._forward(self.embeds)
        except _Stop:
            pass
        except Exception as error:  # the model's own forward on the replica: reported as the reason
            self.capture_error = f"the replica's forward failed: {type(error).__name__}: {error}"
        finally:
            for handle in handles:
                handle.remove()

    def _prefix(self, rep: int) -> str:
        return f"{self.layers_path}.{rep}"

    def layer_plan(self, rep: int, *, residual: bool, heads: bool) -> tuple[Plan, str | None]:
        """The plan of representative layer ``rep`` and, when ``heads`` finds no value/output pair, why."""
        layer, prefix = self.layers[rep], self._prefix(rep)
        roles = layer_roles(layer, prefix, self.definition, self.hidden, self.attention)
        reason = f"{prefix}: {roles.heads_reason}" if heads and roles.heads_reason is not None else None
        return layer_plan(layer, prefix, roles, residual=residual, heads=heads), reason

    def _transform(self, plan: Plan) -> FoldedRotation:
        return FoldedRotation(plan, self.residual, self.head, self.definition.norm_weight_offset)

    def check(self, *, residual: bool, heads: bool) -> str | None:
        """None when the rewrites asked for keep the replica's outputs (module docstring), else why not."""
        if self.capture_error is not None:
            return self.capture_error
        if heads and self.head is None:
            return "the config gives no attention head shape (num_attention_heads, head_dim)"
        for rep in sorted(self.layers):
            reason = self._check_layer(rep, residual=residual, heads=heads)
            if reason is not None:
                return reason
        return self._check_base() if residual else None

    def _check_layer(self, rep: int, *, residual: bool, heads: bool) -> str | None:
        layer, prefix, call = self.layers[rep], self._prefix(rep), self.calls.get(rep)
        if call is None:
            return f"{prefix}: the layer was not reached by the replica's forward"
        plan, reason = self.layer_plan(rep, residual=residual, heads=heads)
        if reason is not None:
            return reason
        transform = self._transform(plan)
        params = {f"{prefix}.{n}": p.detach() for n, p in layer.named_parameters()}
        x = call.hidden
        try:
            with torch.no_grad():
                output = call.call(layer, x)
                self.tuple_output[rep] = isinstance(output, tuple)
                expected = _first(output)
                new = {n[len(prefix) + 1 :]: transform(n, params.__getitem__) for n in plan}
                originals = _installed(layer, new)
                try:
                    got = _first(call.call(layer, x @ self.residual if residual else x))
                finally:
                    _restore(layer, originals)
        except Exception as error:  # the layer's own forward on the rewritten weights
            return f"{prefix}: the layer's forward failed on the rewritten weights: {type(error).__name__}: {error}"
        if residual:
            expected = expected @ self.residual
        diff = _difference(got, expected)
        if diff is None:
            return None
        what = "layer(x Q) differs from layer(x) Q" if residual else "the layer's output changed"
        return f"{prefix}: {what} by {diff:.3g} after folding{self._suspects(rep, plan) if residual else ''}"

    def _suspects(self, rep: int, plan: Plan) -> str:
        """The per-channel hidden-size weights of layer ``rep`` the plan leaves alone, as a clause."""
        prefix = self._prefix(rep)
        left = [
            name
            for name, param in self.layers[rep].named_parameters()
            if param.dim() == 1 and int(param.shape[0]) == self.hidden and f"{prefix}.{name}" not in plan
            and not (name.endswith(".bias") and f"{prefix}.{name[: -len('bias')]}weight" in plan)
        ]  # fmt: skip
        if not left:
            return " (the layer is not a pre-norm residual block the fold covers)"
        return (
            f"; per-channel weights on the residual stream it cannot fold: {', '.join(left)} (e.g. a norm after "
            "the attention/MLP output, a LayerNorm's bias or mean)"
        )

    def _check_base(self) -> str | None:
        """Embedding and final norm + output projection (module docstring)."""
        norm = final_norm(self.replica, self.layers_path, self.hidden, self.embed_weight)
        if norm is None:
            return f"no single final norm of width {self.hidden} beside {self.layers_path} to fold into the output"
        plan = base_plan(self.embed_weight, self.head_weight, norm)
        transform = self._transform(plan)
        reason = self._check_embedding(transform)
        if reason is not None:
            return reason
        head_module = self.head_weight.rpartition(".")[0]
        old_head = self.replica.get_submodule(head_module)
        parent_name, _, child = head_module.rpartition(".")
        parent = self.replica.get_submodule(parent_name) if parent_name else self.replica
        stand_in = nn.Linear(self.hidden, HEAD_ROWS, bias=getattr(old_head, "bias", None) is not None)
        stand_in = stand_in.to(torch.float64)
        with torch.no_grad():
            stand_in.weight.normal_(0.0, 0.05, generator=self.generator)
        for name, module in self.replica.named_modules():
            if not name.startswith(self.layers_path) and name != self.embed_weight.rpartition(".")[0]:
                randomize_parameters(module, self.generator, recurse=False)
        setattr(parent, child, stand_in)
        for rep, layer in self.layers.items():
            layer.forward = _pass_through(self.tuple_output.get(rep, False))
        names = [f"{norm}.weight", self.head_weight]
        installed: dict[str, nn.Parameter | None] = {}
        try:
            params = {n: self.replica.get_parameter(n).detach() for n in names}
            expected = self._forward(self.embeds).logits
            installed = _installed(self.replica, {n: transform(n, params.__getitem__) for n in names})
            got = self._forward(self.embeds @ self.residual).logits
        except Exception as error:  # the model's own forward around pass-through layers
            return f"the model's forward outside the layers failed on the replica: {type(error).__name__}: {error}"
        finally:
            _restore(self.replica, installed)
            for layer in self.layers.values():
                del layer.forward
            setattr(parent, child, old_head)
        diff = _difference(got, expected)
        if diff is None:
            return None
        return (
            f"outside the layers: the logits of inputs_embeds X Q differ from X's by {diff:.3g} after folding {norm} "
            f"into {self.head_weight} (the embeddings or the final norm are not a plain lookup and RMS norm)"
        )

    def _check_embedding(self, transform: FoldedRotation) -> str | None:
        """A 32-row copy of the input embedding: ``emb'(ids) == emb(ids) Q``."""
        module_name, _, pname = self.embed_weight.rpartition(".")
        embed = copy.copy(self.replica.get_submodule(module_name))
        embed._parameters = dict(embed._parameters)
        weight = torch.randn(EMBED_ROWS, self.hidden, generator=self.generator, dtype=torch.float64)
        embed._parameters[pname] = nn.Parameter(weight, requires_grad=False)
        if hasattr(embed, "padding_idx"):
            embed.padding_idx = None
        ids = torch.arange(EMBED_ROWS).reshape(1, -1)
        try:
            with torch.no_grad():
                expected = embed(ids) @ self.residual
                rotated = transform(self.embed_weight, lambda _name: weight)
                embed._parameters[pname] = nn.Parameter(rotated, requires_grad=False)
                got = embed(ids)
        except Exception as error:  # the embedding module's own forward
            return f"{self.embed_weight}: the embedding's forward failed: {type(error).__name__}: {error}"
        diff = _difference(got, expected)
        if diff is None:
            return None
        return f"{self.embed_weight}: emb(ids) with E Q differs from emb(ids) Q by {diff:.3g} (not a plain lookup)"


def _pass_through(as_tuple: bool) -> Callable[..., Any]:
    """A decoder layer's forward that returns its hidden-state input unchanged (in a 1-tuple when the layer's own
    forward returns a tuple)."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        hidden = args[0] if args else kwargs["hidden_states"]
        return (hidden,) if as_tuple else hidden

    return forward
