"""``lowbit quantize`` flags -> the config dict that qhf reads into the run's ``qformats.config.QuantizeConfig``
(:func:`qhf.quant_config.read_quantize_config`), in the reference's vocabulary.

Flags a method does not use are refused naming the flag (``UsageError``); the values themselves are checked once,
by qhf's reader, naming the field.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import UsageError

_INTEGER_ONLY_FLAGS = {
    "group_size": "--group-size", "asym": "--asym", "desc_act": "--desc-act", "damp_percent": "--damp-percent",
    "static_groups": "--static-groups", "mse": "--mse", "no_act_group_aware": "--no-act-group-aware",
    "preset": "--preset", "gptaq": "--gptaq", "foem": "--foem", "foem_alpha": "--foem-alpha",
    "awq_scales": "--awq-scales", "eora_rank": "--eora-rank", "krot": "--krot", "paro_epochs": "--paro-epochs",
    "rotation": "--rotation", "rotation_seed": "--rotation-seed", "bits_budget": "--bits-budget",
    "bits_candidates": "--bits-candidates",
}  # fmt: skip


def quant_method(method: str) -> Any:
    """The :class:`qhf.methods.QuantMethod` of a ``--method`` value (``nf4``: bitsandbytes; qhf's registry)."""
    from qhf.methods import cli_method

    found = cli_method(method)
    if found is None:  # argparse checked the value against the same registry
        from qhf.methods import cli_names

        raise UsageError(f"--method: expected one of {', '.join(cli_names())}, found {method!r}")
    return found


def qhf_method(method: str) -> str:
    """The config method of a ``--method`` value: ``nf4`` names the bitsandbytes 4-bit weight family (its
    method ``bitsandbytes``); every other value is its own method."""
    return str(quant_method(method).name)


def is_weight_only_method(method: str) -> bool:
    """Whether ``--method`` names a weight-only method (``fp8``, ``nf4``, ``gguf``; qhf's registry)."""
    return bool(quant_method(method).weight_only)


def _weight_only_config(args: argparse.Namespace) -> dict[str, Any]:
    """FP8 / bitsandbytes / GGUF: refuse the integer-quantizer flags, map --format/--bits/--fp8-*."""
    given = [flag for name, flag in _INTEGER_ONLY_FLAGS.items() if getattr(args, name) not in (None, False)]
    if given:
        raise UsageError(
            f"--method {args.method}: {', '.join(given)} not used by a weight-only method "
            "(no groups, zero points or calibration)"
        )
    if args.method != "fp8" and (args.fp8_scale is not None or args.fp8_block is not None):
        raise UsageError(f"--fp8-scale/--fp8-block: only for --method fp8, found --method {args.method}")
    config: dict[str, Any] = {"method": qhf_method(args.method)}
    if args.bits is not None:
        config["bits"] = args.bits
    fmt = args.format
    if args.method == "nf4" and fmt is None:
        fmt = "int8" if args.bits == 8 else "nf4"
    if fmt is not None:
        config["format"] = fmt
    if args.fp8_block is not None:
        if len(args.fp8_block) != 2:
            raise UsageError(f"--fp8-block: expected ROWS,COLS, found {args.fp8_block}")
        config["weight_block_size"] = list(args.fp8_block)
    if args.fp8_scale is not None:
        config["weight_scale_method"] = args.fp8_scale
    return config


def quant_config(args: argparse.Namespace) -> dict[str, Any]:
    """The qhf quantization config dict the flags describe."""
    if not quant_method(args.method).builtin:
        return _third_party_config(args)
    if args.setting:
        raise UsageError(f"--setting: the settings of a third-party method; --method {args.method} takes its own flags")
    if is_weight_only_method(args.method):
        return _weight_only_config(args)
    if args.fp8_scale is not None or args.fp8_block is not None:
        raise UsageError(f"--fp8-scale/--fp8-block: only for --method fp8, found --method {args.method}")
    config: dict[str, Any] = {
        "method": args.method,
        "bits": 4 if args.bits is None else args.bits,
        "group_size": 128 if args.group_size is None else args.group_size,
        "sym": not args.asym,
    }
    flags = {
        "desc_act": True if args.desc_act else None,
        "static_groups": True if args.static_groups else None,
        "act_group_aware": False if args.no_act_group_aware else None,
        "mse": args.mse,
        "damp_percent": args.damp_percent,
        "format": args.format,
    }
    config.update({key: value for key, value in flags.items() if value is not None})
    config.update(_asymmetric_config(args))
    config.update(_paroquant_config(args))
    config.update(_rotation_config(args))
    config.update(_budget_config(args))
    if args.preset is not None:
        if args.method != "gptq":
            raise UsageError(
                f"--preset {args.preset}: a GPTQ recipe; it cannot be combined with --method {args.method}"
            )
        from qhf.presets import apply_preset

        config = apply_preset(args.preset, config)
    return config


def _asymmetric_config(args: argparse.Namespace) -> dict[str, Any]:
    """``--gptaq`` / ``--foem`` / ``--foem-alpha`` as the reference's ``gptaq`` / ``foem`` sections,
    ``--eora-rank`` as its ``adapter: {rank}`` (GPTQ family only) and ``--awq-scales`` as lowbit's ``awq_scales``
    (plain GPTQ only)."""
    if args.foem_alpha is not None and args.foem is None:
        raise UsageError("--foem-alpha: only together with --foem")
    out: dict[str, Any] = {}
    if args.eora_rank is not None:
        if args.method != "gptq":
            raise UsageError(f"--eora-rank: EoRA follows a GPTQ-family solve; not with --method {args.method}")
        out["adapter"] = {"rank": args.eora_rank}
    if args.awq_scales:
        variants = (("--gptaq", args.gptaq), ("--foem", args.foem), ("--eora-rank", args.eora_rank))
        given = [flag for flag, value in variants if value is not None]
        if args.method != "gptq" or given:
            with_what = " ".join([f"--method {args.method}", *given])
            raise UsageError(f"--awq-scales: a GPTQ variant of its own; not with {with_what}")
        out["awq_scales"] = True
    if args.gptaq is None and args.foem is None:
        return out
    if args.method != "gptq":
        raise UsageError(f"--gptaq/--foem: GPTQ variants; they cannot be combined with --method {args.method}")
    if args.gptaq is not None and args.foem is not None:
        raise UsageError("--gptaq, --foem: choose one (--foem BETA --foem-alpha ALPHA is both terms)")
    if args.gptaq is not None:
        return {**out, "gptaq": {"alpha": args.gptaq}}
    return {**out, "foem": {"alpha": args.foem_alpha or 0.0, "beta": args.foem}}


def _rotation_config(args: argparse.Namespace) -> dict[str, Any]:
    """``--rotation KIND`` / ``--rotation-seed N`` as qhf's ``rotation: {kind, seed}`` setting (absent: none)."""
    if args.rotation is None:
        if args.rotation_seed is not None:
            raise UsageError("--rotation-seed: only together with --rotation hadamard|random")
        return {}
    if args.rotation == "none":
        if args.rotation_seed is not None:
            raise UsageError("--rotation-seed: --rotation none draws no rotation")
        return {"rotation": {"kind": "none"}}
    return {"rotation": {"kind": args.rotation, "seed": 0 if args.rotation_seed is None else args.rotation_seed}}


def _paroquant_config(args: argparse.Namespace) -> dict[str, Any]:
    """``--krot`` / ``--paro-epochs ROT,FT`` as the reference's ``krot`` / ``opt_rotation_epochs`` /
    ``opt_finetune_epochs`` fields (ParoQuant only)."""
    if args.krot is None and args.paro_epochs is None:
        return {}
    if args.method != "paroquant":
        raise UsageError(f"--krot/--paro-epochs: ParoQuant settings; not with --method {args.method}")
    out: dict[str, Any] = {}
    if args.krot is not None:
        out["krot"] = args.krot
    if args.paro_epochs is not None:
        out["opt_rotation_epochs"], out["opt_finetune_epochs"] = args.paro_epochs
    return out


def _budget_config(args: argparse.Namespace) -> dict[str, Any]:
    """``--bits-budget`` / ``--bits-candidates`` as lowbit's ``bits_budget`` / ``bits_candidates`` settings (checked
    by qhf's reader, naming the field: :mod:`qhf.mixed_precision.settings`)."""
    if args.bits_candidates is not None and args.bits_budget is None:
        raise UsageError("--bits-candidates: only together with --bits-budget")
    if args.bits_budget is None:
        return {}
    out: dict[str, Any] = {"bits_budget": args.bits_budget}
    if args.bits_candidates is not None:
        out["bits_candidates"] = list(args.bits_candidates)
    return out


#: The flags of a third-party method: the config's own fields (its settings come with --setting KEY=VALUE).
_THIRD_PARTY_FLAGS = {"group_size", "asym", "desc_act"}


def _third_party_config(args: argparse.Namespace) -> dict[str, Any]:
    """A third-party method's config: ``--bits`` / ``--group-size`` / ``--asym`` / ``--desc-act`` / ``--format`` and
    its settings from ``--setting KEY=VALUE`` (checked by the method's closed settings class, naming the key); the
    built-in methods' own flags are refused naming them."""
    method = quant_method(args.method)
    given = [
        flag
        for name, flag in _INTEGER_ONLY_FLAGS.items()
        if name not in _THIRD_PARTY_FLAGS and getattr(args, name) not in (None, False)
    ]
    if args.fp8_scale is not None or args.fp8_block is not None:
        given.append("--fp8-scale/--fp8-block")
    if given:
        from qhf.methods import setting_names

        accepted = ", ".join(setting_names(method.settings_type)) or "none"
        raise UsageError(
            f"--method {args.method}: {', '.join(given)} not a setting of this method (its settings, given with "
            f"--setting KEY=VALUE: {accepted})"
        )
    config: dict[str, Any] = {
        "method": method.name,
        "bits": 4 if args.bits is None else args.bits,
        "group_size": 128 if args.group_size is None else args.group_size,
        "sym": not args.asym,
    }
    if args.desc_act:
        config["desc_act"] = True
    if args.format is not None:
        config["format"] = args.format
    for key, value in args.setting or ():
        if key in config or key in ("format", "desc_act"):
            raise UsageError(f"--setting {key}=...: {key} is a config field; use its own flag")
        config[key] = value
    return config
