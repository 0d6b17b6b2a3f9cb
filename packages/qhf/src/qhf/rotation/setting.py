"""The ``rotation`` setting of a calibrated run, resolved into ``QuantizeConfig.settings["rotation"]``.

Accepted spellings: absent / ``None`` / ``"none"`` (the default: no rotation), a kind string (``"hadamard"``,
``"random"``; the reference's ``rotation`` field is such a string), or a dict ``{"kind", "seed", "residual",
"heads"}``. Resolved: ``{"kind": "none"}`` or ``{"kind", "seed" (int >= 0, default 0), "residual", "heads"}`` where
``residual`` / ``heads`` are ``"auto"`` (the default: applied where the fold verifies on this architecture, else
left out and the reason recorded), ``True`` (refused with :class:`~qhf.errors.RotationError` where it does not
verify) or ``False``. A checkpoint's ``meta.rotation`` record (what a run applied) is read back as the setting
when the config has none, so re-running a saved config repeats its rotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..quant_config import QuantConfigError

NONE: dict[str, Any] = {"kind": "none"}
KINDS = ("none", "hadamard", "random")
AUTO = "auto"
SETTING_KEYS = ("kind", "seed", "residual", "heads")
#: Keys a run's ``meta.rotation`` record adds to the setting's (:mod:`qhf.rotation.fold_source`).
RECORD_KEYS = ("matrices", "untied_embeddings", "refused")


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
    allowed = SETTING_KEYS + (RECORD_KEYS if from_record else ())
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise QuantConfigError(f"rotation: unknown keys {unknown}; expected {list(SETTING_KEYS)}")
    kind = value.get("kind", "hadamard")
    if kind not in KINDS:
        raise QuantConfigError(f"rotation.kind: expected one of {', '.join(KINDS)}, found {kind!r}")
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
    return out


def configured_rotation(settings: Mapping[str, Any], meta: Mapping[str, Any]) -> dict[str, Any]:
    """The resolved setting of a config's ``settings["rotation"]``, else of its ``meta["rotation"]`` record."""
    if "rotation" in settings:
        return resolve_rotation(settings["rotation"])
    return resolve_rotation(meta.get("rotation"), from_record=True)


def is_rotated(setting: Mapping[str, Any] | None) -> bool:
    """Whether a resolved setting asks for any rotation."""
    return setting is not None and setting.get("kind", "none") != "none"
