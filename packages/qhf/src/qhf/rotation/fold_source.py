"""Deciding, verifying and installing a run's folded rotation on an opened source.

:func:`prepare_rotation` (before any work) draws the rotations (:func:`qalgos.orthogonal.orthogonal_rotation`:
the residual ``Q`` of the hidden size, the head ``H`` of the head dim), verifies the plan on a float64 replica
(:class:`~qhf.rotation.check.ReplicaCheck`) and decides what applies: each of ``residual`` / ``heads`` that the
setting leaves ``"auto"`` is applied where it verifies and otherwise left out with the reason recorded; one the
setting asks for (``True``) and that does not verify raises :class:`~qhf.errors.RotationError`. The plan then
covers every decoder layer (roles from each layer's own modules) and, with the residual rotation, the embedding,
the final norm and the output projection. :func:`install_rotation` (after the calibration rows are built, so they
are the unrotated run's) makes the source read through it; a tied output projection is untied.

The record (``meta.rotation`` of the saved config, ``QuantizeSummary.rotation``): ``kind``, ``seed``,
``residual`` / ``heads`` (applied or not), ``matrices`` (each applied matrix's size, kind and construction: a
Hadamard order without a construction falls back to a random orthogonal matrix, and this says so),
``untied_embeddings`` when a tied output projection got its own tensor, ``refused`` (part -> reason) when an
``"auto"`` part was left out. Kind ``"learned"`` draws the Hadamard matrices, records its ``steps`` / ``lr``, and
:func:`qhf.rotation.learn.learn_residual` (after the calibration rows) replaces the residual matrix and adds
``learned`` (how it was learned) and the matrix's ``sha256`` to ``matrices.residual``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from qalgos.orthogonal import Rotation, orthogonal_rotation

from ..errors import RotationError
from ..source.opened_source import OpenedSource
from .check import ReplicaCheck
from .fold import FoldedRotation
from .plan import Plan, attention_shape, base_plan, final_norm, layer_plan, layer_roles
from .setting import LEARNED, LEARNED_KEYS

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedRotation:
    """What a run folds: ``transform`` (None when no part applies), ``untie`` (the residual rotation on a tied
    output projection) and the run's ``record`` (module docstring)."""

    transform: FoldedRotation | None
    untie: bool
    record: dict[str, Any]


def _hidden(source: OpenedSource) -> int:
    return int(source.model.get_parameter(source.embed_weight).shape[1])


def _decide(check: ReplicaCheck, setting: dict[str, Any], has_head: bool) -> tuple[bool, bool, dict[str, str]]:
    """``(residual, heads, refused)`` after the replica checks (module docstring)."""
    want = {"residual": setting["residual"] is not False, "heads": setting["heads"] is not False}
    refused: dict[str, str] = {}
    if want["heads"] and not has_head:
        refused["heads"] = "the config gives no attention head shape (num_attention_heads, head_dim)"
        want["heads"] = False
    combined = check.check(residual=want["residual"], heads=want["heads"]) if any(want.values()) else None
    if combined is not None:
        both = want["residual"] and want["heads"]
        for part in ("residual", "heads"):
            if want[part]:
                alone = check.check(residual=part == "residual", heads=part == "heads") if both else combined
                if alone is not None:
                    refused[part] = alone
                    want[part] = False
        if want["residual"] and want["heads"]:  # each verifies alone but not together: refuse both
            refused["heads"] = refused["residual"] = f"verify alone but not together: {combined}"
            want = {"residual": False, "heads": False}
    for part, reason in refused.items():
        if setting[part] is True:
            raise RotationError(f"rotation.{part}: cannot be folded into this model's weights: {reason}")
        logger.warning("rotation.%s left out (it does not fold into this model): %s", part, reason)
    return want["residual"], want["heads"], refused


def prepare_rotation(source: OpenedSource, setting: dict[str, Any]) -> PreparedRotation:
    """The run's rotation for the resolved ``setting`` (:mod:`qhf.rotation.setting`; not ``"none"``)."""
    kind, seed = str(setting["kind"]), int(setting["seed"])
    draw = "hadamard" if kind == LEARNED else kind  # a learned rotation starts from the Hadamard one
    hidden = _hidden(source)
    attention = attention_shape(source.config)
    residual = orthogonal_rotation(hidden, draw, seed, "residual")
    head: Rotation | None = None
    if attention is not None:
        head = orthogonal_rotation(attention.head_dim, draw, seed, "head")
    definition = source.definition
    check = ReplicaCheck(
        source.model, definition, source.discovery.layer_structures, source.embed_weight, source.head_weight,
        attention, residual.matrix, head.matrix if head is not None else None,
    )  # fmt: skip
    use_residual, use_heads, refused = _decide(check, setting, head is not None)
    del check
    plan: Plan = {}
    for index in range(source.num_layers):
        prefix = source.layer_prefix(index)
        layer = source.model.get_submodule(prefix)
        roles = layer_roles(layer, prefix, definition, hidden, attention)
        plan.update(layer_plan(layer, prefix, roles, residual=use_residual, heads=use_heads))
    if use_residual:
        norm = final_norm(source.model, definition.layers_path, hidden, source.embed_weight)
        plan.update(base_plan(source.embed_weight, source.head_weight, norm))
    matrices = {}
    if use_residual:
        matrices["residual"] = residual.describe()
    if use_heads and head is not None:
        matrices["head"] = head.describe()
    untie = use_residual and source.tied
    record: dict[str, Any] = {
        "kind": kind, "seed": seed, "residual": use_residual, "heads": use_heads, "matrices": matrices,
    }  # fmt: skip
    if kind == LEARNED:
        record.update({key: setting[key] for key in LEARNED_KEYS})
    if untie:
        record["untied_embeddings"] = True
    if refused:
        record["refused"] = refused
    transform = None
    if plan:
        transform = FoldedRotation(
            plan,
            residual.matrix if use_residual else None,
            head.matrix if use_heads and head is not None else None,
            definition.norm_weight_offset,
        )
    return PreparedRotation(transform, untie, record)


def install_rotation(source: OpenedSource, prepared: PreparedRotation) -> None:
    """Make ``source`` read through ``prepared``'s transform (nothing when no part applies)."""
    if prepared.transform is not None:
        source.install_transform(prepared.transform, untie=prepared.untie)


def rotation_identity(fingerprint: str, record: dict[str, Any]) -> str:
    """The source identity of a rotated run for resume: the source's fingerprint and the rotation record."""
    text = json.dumps({"source": fingerprint, "rotation": record}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()
