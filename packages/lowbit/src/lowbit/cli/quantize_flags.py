"""``lowbit quantize`` flags -> the config dict that qhf reads into the run's ``qformats.config.QuantizeConfig``
(:func:`qhf.quant_config.read_quantize_config`), in the reference's vocabulary.

Each method declares the flags it takes (``QuantMethod.cli_flags``, :mod:`lowbit.cli.method_flags`); a flag the
method does not take is refused naming the flag and the method (``UsageError``); the values themselves are checked
once, by qhf's reader, naming the field.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import UsageError
from .method_flags import own_settings, refuse_flags_not_taken


def quant_method(method: str) -> Any:
    """The :class:`qhf.methods.QuantMethod` of a ``--method`` value (``nf4``: bitsandbytes; qhf's registry)."""
    from qhf.methods import cli_method

    found = cli_method(method)
    if found is None:  # argparse checked the value against the same registry
        from qhf.methods import cli_names

        raise UsageError(f"--method: expected one of {', '.join(cli_names())}, found {method!r}")
    return found


def _weight_only_config(args: argparse.Namespace) -> dict[str, Any]:
    """FP8 / bitsandbytes / GGUF: map --format/--bits/--fp8-* (the method refused the flags it does not take)."""
    method = quant_method(args.method)
    config: dict[str, Any] = {"method": method.name}
    if args.bits is not None:
        config["bits"] = args.bits
    fmt = args.format if args.format is not None else method.flag_format(args.bits)
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
    """The qhf quantization config dict the flags describe (a flag the method does not take refused first)."""
    method = quant_method(args.method)
    refuse_flags_not_taken(args, method)
    if not method.builtin:
        return _third_party_config(args)
    if args.setting:
        raise UsageError(f"--setting: the settings of a third-party method; --method {args.method} takes its own flags")
    if method.weight_only:
        return _weight_only_config(args)
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
        out["adapter"] = {"rank": args.eora_rank}
    if args.awq_scales:
        variants = (("--gptaq", args.gptaq), ("--foem", args.foem), ("--eora-rank", args.eora_rank))
        given = [flag for flag, value in variants if value is not None]
        if given:
            with_what = " ".join([f"--method {args.method}", *given])
            raise UsageError(f"--awq-scales: a GPTQ variant of its own; not with {with_what}")
        out["awq_scales"] = True
    if args.gptaq is None and args.foem is None:
        return out
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


def _third_party_config(args: argparse.Namespace) -> dict[str, Any]:
    """A third-party method's config: ``--bits`` / ``--group-size`` / ``--asym`` / ``--desc-act`` / ``--format``, its
    own flags and ``--setting KEY=VALUE`` as its settings (checked by the method's closed settings class, naming the
    key)."""
    from qhf.methods.cli_flags import INTEGER_FLAGS

    method = quant_method(args.method)
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
    settings = [*own_settings(args, method, frozenset(f.flag for f in INTEGER_FLAGS)).items(), *(args.setting or ())]
    for key, value in settings:
        if key in config or key in ("format", "desc_act"):
            raise UsageError(f"--setting {key}=...: {key} is a config field; use its own flag")
        config[key] = value
    return config
