"""``lowbit quantize`` flags -> the config dict that qhf reads into the run's ``qformats.config.QuantizeConfig``
(:func:`qhf.quant_config.read_quantize_config`), in the reference's vocabulary.

Each method declares the flags it takes and the config fields each one gives (``QuantMethod.cli_flags``, qhf's
``MethodFlag.config``; :mod:`lowbit.cli.method_flags` adds them to the parser): this module keeps no flag -> field
table, only the common ``--method`` / ``--bits`` / ``--format``. A flag the method does not take is refused naming the
flag and the method (``UsageError``), as are flags that do not fit together; the values themselves are checked once,
by qhf's reader, naming the field.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import UsageError
from .method_flags import refuse_flags_not_taken


def quant_method(method: str) -> Any:
    """The :class:`qhf.methods.QuantMethod` of a ``--method`` value (``nf4``: bitsandbytes; qhf's registry)."""
    from qhf.methods import cli_method

    found = cli_method(method)
    if found is None:  # argparse checked the value against the same registry
        from qhf.methods import cli_names

        raise UsageError(f"--method: expected one of {', '.join(cli_names())}, found {method!r}")
    return found


def _flag_values(args: argparse.Namespace, method: Any) -> dict[str, Any]:
    """The values in ``args`` of ``method``'s flags, by ``dest`` (None or False: not given)."""
    return {flag.dest: flag.value(args) for flag in method.cli_flags}


def _flag_fields(args: argparse.Namespace, method: Any) -> dict[str, Any]:
    """The config fields ``method``'s flags give (each flag's own ``config``, qhf's ``MethodFlag``); flags that do
    not fit together are a ``UsageError`` naming them."""
    from qhf.methods.cli_flags import FlagCombinationError, method_config

    try:
        return method_config(args.method, method.cli_flags, _flag_values(args, method))
    except FlagCombinationError as exc:
        raise UsageError(str(exc)) from None


def _weight_only_config(args: argparse.Namespace, method: Any) -> dict[str, Any]:
    """FP8 / bitsandbytes / GGUF: ``--bits``, ``--format`` (or the method's ``flag_format``) and the method's flags
    (``--fp8-*``; the method refused the flags it does not take)."""
    config: dict[str, Any] = {"method": method.name}
    if args.bits is not None:
        config["bits"] = args.bits
    fmt = args.format if args.format is not None else method.flag_format(args.bits)
    if fmt is not None:
        config["format"] = fmt
    config.update(_flag_fields(args, method))
    return config


def quant_config(args: argparse.Namespace) -> dict[str, Any]:
    """The qhf quantization config dict the flags describe (a flag the method does not take refused first): the
    common ``--bits`` / ``--format``, then what each of the method's flags gives (its ``MethodFlag.config``), then
    the recipe flags' rewrites (``--preset``) and what the preset adds for ``--target``
    (:func:`preset_target_fields`)."""
    from qhf.methods.cli_flags import rewritten

    method = quant_method(args.method)
    refuse_flags_not_taken(args, method)
    if not method.builtin:
        return _third_party_config(args, method)
    if args.setting:
        raise UsageError(f"--setting: the settings of a third-party method; --method {args.method} takes its own flags")
    if method.weight_only:
        return _weight_only_config(args, method)
    config: dict[str, Any] = {"method": args.method, "bits": 4 if args.bits is None else args.bits}
    if args.format is not None:
        config["format"] = args.format
    config.update(_flag_fields(args, method))
    config = rewritten(method.cli_flags, _flag_values(args, method), config)
    added = preset_target_fields(args)
    if added.get("adapter") is not None and config.get("awq_scales") and "adapter" not in config:
        raise UsageError(
            f"--awq-scales: --preset {args.preset} --target {args.target} adds an EoRA adapter, which GPTQ on "
            "AWQ-scaled weights does not take (its covariance would mix scaled and unscaled inputs); add --eora-rank 0 "
            "to leave the adapter out"
        )
    return {**added, **config}


def preset_target_fields(args: argparse.Namespace) -> dict[str, Any]:
    """What ``--preset NAME`` adds for ``--target ENGINE[:KERNEL]`` (qhf's ``presets.target_settings``: ``best``
    for an engine that loads LoRA adapters, an EoRA ``adapter``); nothing without both flags. The flags given
    explicitly win over it (``--eora-rank``)."""
    preset, target = getattr(args, "preset", None), getattr(args, "target", None)
    if preset is None or target is None:
        return {}
    from qformats.engines import EngineTargetError
    from qhf.presets import target_settings

    try:
        return target_settings(str(preset), str(target))
    except EngineTargetError as exc:
        raise UsageError(f"--target: {exc}") from None


def _third_party_config(args: argparse.Namespace, method: Any) -> dict[str, Any]:
    """A third-party method's config: ``--bits``, ``--format``, what its flags give (``--group-size`` / ``--asym`` /
    ``--desc-act`` their fields, its own flags the settings of their names) and ``--setting KEY=VALUE`` as its
    settings (checked by the method's closed settings class, naming the key)."""
    config: dict[str, Any] = {"method": method.name, "bits": 4 if args.bits is None else args.bits}
    if args.format is not None:
        config["format"] = args.format
    config.update(_flag_fields(args, method))
    for key, value in args.setting or ():
        if key in config or key in ("format", "desc_act"):
            raise UsageError(f"--setting {key}=...: {key} is a config field; use its own flag")
        config[key] = value
    return config
