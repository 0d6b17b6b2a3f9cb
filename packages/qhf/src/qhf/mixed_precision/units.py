"""Allocation units and what each stores at each width, from the source's structure alone (nothing materialized).

A unit is the set of one decoder layer's quantized modules that must share one width: the modules reading one
input (qlooper's ``input_key``: q/k/v, gate/up), which engines fuse into one matrix (vLLM's ``qkv_proj`` /
``gate_up_proj`` hold one width), and all of a layer's experts (an engine's fused-MoE layer holds one width for
every expert). A module reading its own input (``o_proj``, ``down_proj``) is a unit of its own.

A unit's cost at a width is the bits the config's layout stores for its modules at that width
(:func:`qformats.layouts.stored_size.stored_bits`: codes, scales, zeros and ``g_idx``, whatever the layout
writes), with the config's ``group_size``, ``sym`` and ``pack_dtype``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from qformats.config import QuantizeConfig
from qformats.errors import LayoutError
from qformats.layouts.stored_size import stored_bits
from qlooper.definition import ResolvedModule

from ..errors import QHFError
from ..looper_bridge import decoder_groups
from ..source.opened_source import OpenedSource

EXPERTS_KEY = "experts"


def unit_key(mod: ResolvedModule) -> str:
    """The key of ``mod``'s unit within its layer: ``experts`` for an expert, else its input key."""
    return EXPERTS_KEY if mod.expert is not None else mod.input_key


@dataclass(frozen=True)
class Member:
    """One quantized module: full dotted ``name`` and its weight's ``[out, in]``."""

    name: str
    out_features: int
    in_features: int

    @property
    def weights(self) -> int:
        return self.out_features * self.in_features


@dataclass(frozen=True)
class Unit:
    """Modules of decoder layer ``layer`` that share one width. ``key``: ``"<layer prefix>|<input key>"`` (or
    ``|experts``), unique in a model; ``members`` in the layer's group order."""

    key: str
    layer: int
    members: tuple[Member, ...]

    @property
    def weights(self) -> int:
        return sum(m.weights for m in self.members)


def budget_units(source: OpenedSource) -> list[Unit]:
    """Every decoder layer's units, in layer order and, within a layer, in the order their first module is
    quantized."""
    units: list[Unit] = []
    for index, groups in decoder_groups(source):
        prefix = source.layer_prefix(index)
        members: dict[str, list[Member]] = {}
        for group in groups:
            for mod in group.modules:
                key = unit_key(mod)
                out_features, in_features = (int(d) for d in mod.weight.shape)
                members.setdefault(key, []).append(Member(mod.full_name, out_features, in_features))
        units += [Unit(f"{prefix}|{key}", index, tuple(found)) for key, found in members.items()]
    return units


class StoredBits:
    """Bits the config's layout stores per module shape and width (each distinct ``(out, in, bits, group_size)``
    packed once)."""

    def __init__(self, config: QuantizeConfig) -> None:
        self.config = config
        self._seen: dict[tuple[int, int, int, int], int] = {}

    def module(self, member: Member, bits: int, group_size: int | None = None) -> int:
        """Stored bits of ``member`` at ``bits`` (``group_size``: the config's when None); a width the layout
        cannot hold for this shape raises :class:`~qhf.errors.QHFError` naming the module."""
        group = self.config.group_size if group_size is None else group_size
        key = (member.out_features, member.in_features, bits, group)
        if key not in self._seen:
            try:
                self._seen[key] = stored_bits(
                    self.config.layout,
                    member.out_features,
                    member.in_features,
                    bits,
                    group,
                    sym=self.config.sym,
                    pack_dtype=self.config.pack_dtype,
                )
            except LayoutError as exc:
                raise QHFError(
                    f"bits_candidates: {bits}-bit cannot be stored for {member.name} "
                    f"[{member.out_features} x {member.in_features}]: {exc}; leave {bits} out of bits_candidates"
                ) from None
        return self._seen[key]

    def unit(self, unit: Unit, bits: int) -> int:
        """Stored bits of every module of ``unit`` at ``bits``."""
        return sum(self.module(m, bits) for m in unit.members)

    def as_configured(self, members: Iterable[Member]) -> tuple[int, int]:
        """``(stored bits, weights)`` of ``members`` at the widths and group sizes the config's ``dynamic`` rules
        give them (``QuantizeConfig.for_module``; a module a negative rule keeps dense is not counted)."""
        bits = weights = 0
        for member in members:
            spec = self.config.for_module(member.name)
            if spec is None:
                continue
            bits += self.module(member, spec.bits, spec.group_size)
            weights += member.weights
        return bits, weights
