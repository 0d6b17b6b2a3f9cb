"""Modules of weight-only checkpoint directories: FP8, bitsandbytes (NF4 / FP4 / int8) and GGUF blocks.

These directories (config ``method`` ``fp8`` / ``bitsandbytes`` / ``gguf``, the reference's weight-only export)
have no ``scales * (codes - zeros)`` modules, so :meth:`Checkpoint.modules` does not list them. Here a module
is a prefix owning a marker tensor of one of the method's weight families (grouped by
:func:`qformats.layouts.families.marked_modules`, the same path ``Checkpoint.modules`` takes for QQQ,
ParoQuant, VPTQ and EXL3), summarized by its family's ``WeightFamily.summary``
(:mod:`qformats.weight_only_summaries`: its stored type, dims, tensors and violations).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import QFormatsError
from ..layouts.families import families_of_method, family_by_marker, marked_modules, weight_only_methods
from ..weight_only_summaries import WeightOnlyModule

if TYPE_CHECKING:
    from .reader import Checkpoint

__all__ = ["WeightOnlyModule", "is_weight_only", "module_tensor_names", "weight_only_modules"]


def is_weight_only(ck: Checkpoint) -> bool:
    """True when the checkpoint's config method is a weight-only family's (:func:`weight_only_methods`)."""
    return ck.fields.method in weight_only_methods()


def weight_only_modules(ck: Checkpoint) -> list[WeightOnlyModule]:
    """Every weight-only module of ``ck`` (prefix order), with its stored type, dims, tensors and violations."""
    method = ck.fields.method
    found = []
    for prefix, members in marked_modules(families_of_method(method), ck.weight_map).items():
        shapes = {local: ck.shape_of(name) for local, name in members.items()}
        family = family_by_marker(shapes, method)
        if family is None or family.summary is None:
            raise QFormatsError(f"{prefix}: no weight-only family of method {method!r} marks tensors {sorted(shapes)}")
        found.append(family.summary(ck, prefix, shapes))
    return found


def module_tensor_names(ck: Checkpoint, modules: list[WeightOnlyModule]) -> set[str]:
    """The full names of every module's stored tensors (the rest of the checkpoint is dense)."""
    return {f"{m.name}.{local}" for m in modules for local in m.tensors}
