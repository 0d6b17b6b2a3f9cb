"""The ``rotation`` setting of a calibrated run, resolved into ``QuantizeConfig.settings["rotation"]``.

Accepted spellings: absent / ``None`` / ``"none"`` (the default: no rotation), a kind string (``"hadamard"``,
``"random"``, ``"learned"``; the reference's ``rotation`` field is such a string), or a dict ``{"kind", "seed",
"residual", "heads"}`` (kind ``"learned"`` also ``"steps"``, ``"lr"``). Resolved: ``{"kind": "none"}`` or
``{"kind", "seed" (int >= 0, default 0), "residual", "heads"}`` (``"learned"``: plus ``"steps"`` (int >= 0, default
:data:`LEARNED_STEPS`) and ``"lr"`` (float > 0, default :data:`LEARNED_LR`); its residual rotation is the Hadamard one
optimized on the calibration rows, :mod:`qhf.rotation.learn`; it cannot be ``residual: false``) where
``residual`` / ``heads`` are ``"auto"`` (the default: applied where the fold verifies on this architecture, else
left out and the reason recorded), ``True`` (refused with :class:`~qhf.errors.RotationError` where it does not
verify) or ``False``. A checkpoint's ``meta.rotation`` record (what a run applied) is read back as the setting
when the config has none, so re-running a saved config repeats its rotation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..quant_config import QuantConfigError

NONE: dict[str, Any] = {"kind": "none"}
KINDS = ("none", "hadamard", "random", "learned")
LEARNED = "learned"
AUTO = "auto"
SETTING_KEYS = ("kind", "seed", "residual", "heads")
#: The keys only kind ``"learned"`` takes.
LEARNED_KEYS = ("steps", "lr")
#: Adam steps and learning rate of a learned rotation by default (:mod:`qhf.rotation.learn`).
LEARNED_STEPS = 100
LEARNED_LR = 1e-3
#: Keys a run's ``meta.rotation`` record adds to the setting's (:mod:`qhf.rotation.fold_source`).
RECORD_KEYS = ("matrices", "untied_embeddings", "refused", "learned")


def resolve_rotation(value: Any, *, from_record: bool = False) -> dict[str, Any]:
    """The resolved ``rotation`` setting of ``value`` (module docstring); raises ``QuantConfigError`` naming the
    field. ``from_record``: ``value`` is a checkpoint's ``meta.rotation`` (its record-only keys are dropped)."""
    if value is None or value is False or value == "none":
        return dict(NONE)
    if isinstance(value, str):
        value = {"kind": value}
    if not isinstance(value, Mapping):
        raise QuantConfigError(
            f"rotation: expected a kind ({', '.join(KINDS)}) or a dict like {{'kind': 'hadamard', 'seed': 0}}, "
            f"found {value!r}"
        )
    kind = value.get("kind", "hadamard")
    if kind not in KINDS:
        raise QuantConfigError(f"rotation.kind: expected one of {', '.join(KINDS)}, found {kind!r}")
    keys = SETTING_KEYS + (LEARNED_KEYS if kind == LEARNED else ())
    unknown = sorted(set(value) - set(keys + (RECORD_KEYS if from_record else ())))
    if unknown:
        raise QuantConfigError(f"rotation: unknown keys {unknown} for kind {kind!r}; expected {list(keys)}")
    if kind == "none":
        return dict(NONE)
    seed = value.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise QuantConfigError(f"rotation.seed: expected a non-negative integer, found {seed!r}")
    out: dict[str, Any] = {"kind": kind, "seed": seed}
    for part in ("residual", "heads"):
        switch = value.get(part, AUTO)
        if switch not in (AUTO, True, False) or (isinstance(switch, int) and not isinstance(switch, bool)):
            raise QuantConfigError(f"rotation.{part}: expected 'auto', true or false, found {switch!r}")
        out[part] = switch
    if out["residual"] is False and out["heads"] is False:
        raise QuantConfigError("rotation: residual and heads are both false; use kind 'none' for no rotation")
    if kind == LEARNED:
        out.update(_learned(value, out["residual"]))
    return out


def _learned(value: Mapping[str, Any], residual: Any) -> dict[str, Any]:
    """The ``steps`` / ``lr`` of a learned rotation's setting, checked."""
    if residual is False:
        raise QuantConfigError("rotation.residual: kind 'learned' optimizes the residual rotation; it cannot be false")
    steps = value.get("steps", LEARNED_STEPS)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise QuantConfigError(f"rotation.steps: expected a non-negative integer, found {steps!r}")
    lr = value.get("lr", LEARNED_LR)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise QuantConfigError(f"rotation.lr: expected a positive finite number, found {lr!r}")
    return {"steps": steps, "lr": float(lr)}


def configured_rotation(settings: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved setting of a config's ``settings["rotation"]``, else of its ``meta["rotation"]`` record."""
    if "rotation" in settings:
        return resolve_rotation(settings["rotation"])
    return resolve_rotation(meta.get("rotation"), from_record=True)


def is_rotated(setting: Mapping[str, Any] | None) -> bool:
    """Whether a resolved setting asks for any rotation."""
    return setting is not None and setting.get("kind", "none") != "none"
