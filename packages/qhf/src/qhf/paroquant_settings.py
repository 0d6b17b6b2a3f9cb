"""ParoQuant settings: the reference's ``krot`` and ``opt_*`` fields read from a user's config, turned into the
qalgos :class:`~qalgos.paroquant.ParoSpec`, and written back into the checkpoint's config.

A config ``{"method": "paroquant", "group_size": 64, "opt_rotation_epochs": 10, ...}`` keeps these keys in the
run's ``qformats.config.QuantizeConfig`` (``krot`` in its ``settings``, ``opt_*`` in its ``unknown``). Unset
fields take lowbit's defaults (``ParoSpec``'s: the reference's values except the optimisation budget, which is
smaller so that a CPU run takes minutes). Options that would change the method rather than its budget are
accepted only at the value lowbit implements (``opt_optimizer`` ``adamw``, ``opt_pair_ratio`` 0.5,
``opt_scope`` ``module``, ``opt_quantizer_impl`` ``reference``: learned asymmetric zero points); anything else
is refused naming the field. The saved config carries ``krot``, ``zero_point`` false and every ``opt_*`` value
under ``meta``, as the reference writes them.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

from .errors import QHFError

if TYPE_CHECKING:
    from qalgos.paroquant import ParoSpec
    from qformats.config import QuantizeConfig

#: Reference field -> ParoSpec field (numbers).
NUMERIC = {
    "krot": "krot",
    "opt_rotation_epochs": "rotation_epochs",
    "opt_finetune_epochs": "finetune_epochs",
    "opt_train_samples": "train_samples",
    "opt_validation_samples": "validation_samples",
    "opt_batch_size": "batch_size",
    "opt_rotation_lr": "rotation_lr",
    "opt_weight_lr": "weight_lr",
    "opt_quantizer_lr": "quantizer_lr",
    "opt_seed": "seed",
    "opt_weight_decay": "weight_decay",
    "opt_eps": "eps",
}
#: Fields lowbit implements at one value only (the reference's defaults).
FIXED = {"opt_optimizer": "adamw", "opt_pair_ratio": 0.5, "opt_scope": "module", "opt_quantizer_impl": "reference"}
#: Reference fields about its GPU execution (kernels, AMP, CUDA graphs, memory); accepted and ignored.
EXECUTION = (
    "opt_fused_rotation", "opt_gradient_checkpointing", "opt_stage_cudagraph", "opt_amp", "opt_best_state_dtype",
    "opt_train_on_noisy_inputs", "opt_stage_impl", "opt_pair_impl", "opt_amsgrad", "opt_sgd_momentum",
    "opt_sgd_dampening", "opt_sgd_nesterov",
)  # fmt: skip


class ParoSettingsError(QHFError, ValueError):
    """A ParoQuant field is malformed or asks for a variant lowbit does not implement (names the field)."""


def paro_fields(config: QuantizeConfig) -> dict[str, Any]:
    """The ``krot`` / ``opt_*`` fields of ``config`` (from its ``settings`` and ``unknown``)."""
    fields = {**config.settings, **config.unknown}
    return {k: v for k, v in fields.items() if k == "krot" or k.startswith("opt_")}


def paro_spec(config: QuantizeConfig) -> ParoSpec:
    """The qalgos ``ParoSpec`` of ``config`` (bits, group size, and its ``krot`` / ``opt_*`` fields)."""
    from qalgos.errors import SpecError
    from qalgos.paroquant import ParoSpec

    extra = paro_fields(config)
    for name, value in FIXED.items():
        if name in extra and extra[name] != value:
            raise ParoSettingsError(f"{name}: lowbit's ParoQuant implements {value!r} only, found {extra[name]!r}")
    if extra.get("opt_amsgrad") or extra.get("opt_sgd_momentum"):
        raise ParoSettingsError("opt_amsgrad / opt_sgd_momentum: lowbit's ParoQuant runs plain AdamW only")
    kwargs: dict[str, Any] = {"bits": config.width, "group_size": config.group_size}
    for name, target in NUMERIC.items():
        if name in extra:
            value = extra[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ParoSettingsError(f"{name}: expected a number, found {value!r}")
            kwargs[target] = value
    if "opt_betas" in extra:
        betas = extra["opt_betas"]
        if not isinstance(betas, (list, tuple)) or len(betas) != 2:
            raise ParoSettingsError(f"opt_betas: expected [beta1, beta2], found {betas!r}")
        kwargs["betas"] = (float(betas[0]), float(betas[1]))
    low = extra.get("opt_channel_scale_clamp_min", 1e-2)
    high = extra.get("opt_channel_scale_clamp_max", 1e2)
    kwargs["scale_clamp"] = (float(low), float(high))
    try:
        return ParoSpec(**kwargs)
    except SpecError as exc:
        raise ParoSettingsError(f"ParoQuant settings: {exc}") from None


def checkpoint_fields(config: QuantizeConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(top-level fields, meta fields)`` the reference writes for a ParoQuant config: ``zero_point`` false and
    ``krot``; every ``opt_*`` value under ``meta``."""
    spec = paro_spec(config)
    by_target = {target: name for name, target in NUMERIC.items()}
    meta: dict[str, Any] = {}
    for f in fields(spec):
        name = by_target.get(f.name)
        if name is not None and name != "krot":
            meta[name] = getattr(spec, f.name)
    meta.update(
        opt_betas=list(spec.betas),
        opt_channel_scale_clamp_min=spec.scale_clamp[0],
        opt_channel_scale_clamp_max=spec.scale_clamp[1],
        **FIXED,
    )
    return {"zero_point": False, "krot": spec.krot}, dict(sorted(meta.items()))


def refuse_unsupported(config: QuantizeConfig) -> None:
    """ParoQuant's fixed choices: 4-bit, symmetric config (the reference refuses ``sym=False``; the AWQ part stores
    zero points either way), no act-order; raises :class:`ParoSettingsError` naming the field."""
    if config.width != 4:
        raise ParoSettingsError(f"bits: ParoQuant stores 4-bit AWQ codes, found {config.width}")
    if not config.sym:
        raise ParoSettingsError("sym: ParoQuant takes sym=True (the reference refuses False; zero points are learned)")
    if config.desc_act:
        raise ParoSettingsError("desc_act: ParoQuant keeps the natural column order")
    paro_spec(config)
