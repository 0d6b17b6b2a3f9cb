"""The ``lowbit quantize`` flags a method takes: :class:`MethodFlag` and the built-in methods' flag sets.

A :class:`~qhf.methods.QuantMethod` lists its flags in ``cli_flags``; the CLI adds every registered method's flags
to ``quantize``'s parser (one flag string, one declaration: two different declarations of a flag are refused naming
both methods) and refuses a flag the chosen method does not list, naming the flag and the method. Each flag also
says which config fields its value gives (:attr:`MethodFlag.config`, asked with every flag value of the call in a
:class:`GivenFlags`; flags that only fit together, such as ``--foem-alpha`` without ``--foem``, raise
:class:`FlagCombinationError`), and a recipe flag may rewrite the whole config (:attr:`MethodFlag.rewrite`:
``--preset``): the CLI (``lowbit.cli.quantize_flags``) builds a method's config from its flags alone. A flag without
``config`` (a third-party method's own) sets the setting of the flag's name (``--clip-grid 6``: ``clip_grid: 6``),
checked by the method's closed settings class.

``kwargs`` are ``argparse.add_argument`` keywords; ``type`` may be a callable or the name of one of the CLI's value
parsers (``positive_int``, ``non_negative_int``, ``group_size``, ``unit_float``, ``int_list``, ``epoch_pair``), so
building these declarations imports nothing.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


class FlagCombinationError(ValueError):
    """Method flags given together that do not fit (``--foem-alpha`` without ``--foem``); the message names the
    flags. The CLI reports it as a usage error."""


@dataclass(frozen=True)
class GivenFlags:
    """One ``lowbit quantize`` call's method flags: ``method``, the ``--method`` value as given, and ``values``, every
    flag of the method by its ``dest`` (None or False: not given)."""

    method: str
    values: Mapping[str, Any] = field(default_factory=dict)

    def __getitem__(self, dest: str) -> Any:
        return self.values.get(dest)


#: ``(value, given) -> config fields``: what a flag's value (None or False: not given) puts in the config.
FlagConfig = Callable[[Any, GivenFlags], Mapping[str, Any]]
#: ``(value, config) -> config``: a recipe flag's rewrite of the whole config, after every flag's fields.
FlagRewrite = Callable[[Any, dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class MethodFlag:
    """One ``lowbit quantize`` flag. ``about``: what it is, in the refusal of a method that does not take it
    (``--awq-scales: a GPTQ variant of its own; not with --method awq``); ``integer``: a flag of groups, zero points
    or calibration (a weight-only method refuses those together, saying so); ``config``: the config fields its value
    gives (None: the setting of the flag's name, when given); ``rewrite``: a recipe's rewrite of the config."""

    flag: str
    help: str
    kwargs: tuple[tuple[str, Any], ...] = ()
    about: str = ""
    integer: bool = True
    config: FlagConfig | None = None
    rewrite: FlagRewrite | None = None

    @property
    def dest(self) -> str:
        """The ``argparse`` destination (``--foem-alpha``: ``foem_alpha``), also a third-party setting's key."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def options(self) -> dict[str, Any]:
        """The ``argparse.add_argument`` keywords (``help`` included)."""
        return {**dict(self.kwargs), "help": self.help}

    def value(self, args: argparse.Namespace) -> Any:
        """The flag's parsed value in ``args`` (None or False: not given)."""
        return getattr(args, self.dest, None)

    def given(self, args: argparse.Namespace) -> bool:
        """Whether ``args`` holds a value the user gave for this flag."""
        return self.value(args) not in (None, False)

    def shown(self, args: argparse.Namespace) -> str:
        """The flag as given, with its value when the flag has choices (``--preset best``)."""
        return f"{self.flag} {self.value(args)}" if "choices" in dict(self.kwargs) else self.flag

    def fields(self, given: GivenFlags) -> dict[str, Any]:
        """The config fields this flag's value in ``given`` gives (:attr:`config`; without one: the setting of the
        flag's name when given). Raises :class:`FlagCombinationError` for flags that do not fit together."""
        value = given[self.dest]
        if self.config is not None:
            return dict(self.config(value, given))
        return {} if value is None or value is False else {self.dest: value}


def method_flag(
    flag: str,
    help: str,
    *,
    about: str = "",
    integer: bool = True,
    config: FlagConfig | None = None,
    rewrite: FlagRewrite | None = None,
    **kwargs: Any,
) -> MethodFlag:
    """A :class:`MethodFlag` from ``argparse.add_argument`` keywords."""
    return MethodFlag(flag, help, tuple(kwargs.items()), about, integer, config, rewrite)


def method_config(method: str, flags: tuple[MethodFlag, ...], values: Mapping[str, Any]) -> dict[str, Any]:
    """The config fields ``flags`` give for ``values`` (by ``dest``; ``method``: the ``--method`` value), in the
    flags' order, then each recipe flag's rewrite (:attr:`MethodFlag.rewrite`, given ones only)."""
    given = GivenFlags(method, {flag.dest: values.get(flag.dest) for flag in flags})
    config: dict[str, Any] = {}
    for flag in flags:
        config.update(flag.fields(given))
    return config


def rewritten(flags: tuple[MethodFlag, ...], values: Mapping[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """``config`` after the rewrites of the recipe flags given in ``values`` (``--preset``), in the flags' order."""
    for flag in flags:
        value = values.get(flag.dest)
        if flag.rewrite is not None and value is not None and value is not False:
            config = flag.rewrite(value, config)
    return config


# --- what the built-in flags give ------------------------------------------------------------------------------


def _field(key: str) -> FlagConfig:
    """``{key: value}`` when the flag was given (a value flag)."""
    return lambda value, _given: {} if value is None else {key: value}


def _switch(key: str, stored: object = True) -> FlagConfig:
    """``{key: stored}`` when the switch was given (a ``store_true`` flag)."""
    return lambda value, _given: {key: stored} if value else {}


def _checked_elsewhere(_value: Any, _given: GivenFlags) -> Mapping[str, Any]:
    """A companion flag: its value is read (and checked) by the flag it goes with."""
    return {}


def _rotation(value: Any, given: GivenFlags) -> dict[str, Any]:
    """``--rotation KIND`` / ``--rotation-seed N`` as qhf's ``rotation: {kind, seed}`` setting (absent: none)."""
    seed = given["rotation_seed"]
    if value is None:
        if seed is not None:
            raise FlagCombinationError("--rotation-seed: only together with --rotation hadamard|random|learned")
        return {}
    if value == "none":
        if seed is not None:
            raise FlagCombinationError("--rotation-seed: --rotation none draws no rotation")
        return {"rotation": {"kind": "none"}}
    return {"rotation": {"kind": value, "seed": 0 if seed is None else seed}}


def _bits_budget(value: Any, given: GivenFlags) -> dict[str, Any]:
    """``--bits-budget`` / ``--bits-candidates`` as lowbit's ``bits_budget`` / ``bits_candidates`` settings (checked
    by qhf's reader, naming the field: :mod:`qhf.mixed_precision.settings`)."""
    candidates = given["bits_candidates"]
    if value is None:
        if candidates is not None:
            raise FlagCombinationError("--bits-candidates: only together with --bits-budget")
        return {}
    out: dict[str, Any] = {"bits_budget": value}
    if candidates is not None:
        out["bits_candidates"] = list(candidates)
    return out


def _gptaq(value: Any, given: GivenFlags) -> dict[str, Any]:
    """``--gptaq ALPHA``: the reference's ``gptaq: {alpha}`` section (not with ``--foem``)."""
    if value is None:
        return {}
    if given["foem"] is not None:
        raise FlagCombinationError("--gptaq, --foem: choose one (--foem BETA --foem-alpha ALPHA is both terms)")
    return {"gptaq": {"alpha": value}}


def _foem(value: Any, given: GivenFlags) -> dict[str, Any]:
    """``--foem BETA`` (``--foem-alpha ALPHA``): the reference's ``foem: {alpha, beta}`` section."""
    if value is None:
        if given["foem_alpha"] is not None:
            raise FlagCombinationError("--foem-alpha: only together with --foem")
        return {}
    return {"foem": {"alpha": given["foem_alpha"] or 0.0, "beta": value}}


def _eora_rank(value: Any, _given: GivenFlags) -> dict[str, Any]:
    """``--eora-rank R``: the reference's ``adapter: {rank}``; ``0``: ``adapter: None`` (no adapter, also none of
    what a preset adds for the target engine)."""
    if value is None:
        return {}
    return {"adapter": None} if value == 0 else {"adapter": {"rank": value}}


def _awq_scales(value: Any, given: GivenFlags) -> dict[str, Any]:
    """``--awq-scales``: lowbit's ``awq_scales`` (plain GPTQ only: a GPTQ variant of its own)."""
    if not value:
        return {}
    variants = (("--gptaq", given["gptaq"]), ("--foem", given["foem"]), ("--eora-rank", given["eora_rank"] or None))
    others = [flag for flag, other in variants if other is not None]
    if others:
        with_what = " ".join([f"--method {given.method}", *others])
        raise FlagCombinationError(f"--awq-scales: a GPTQ variant of its own; not with {with_what}")
    return {"awq_scales": True}


def _preset(value: Any, config: dict[str, Any]) -> dict[str, Any]:
    """``--preset NAME``: the recipe's settings at the config's ``bits`` under the config built so far (flags given
    explicitly win). ``--asym`` is a switch: a config's ``sym: true`` says it was not given, so a recipe that sets
    ``sym`` (``best`` at 2 bits) keeps its own."""
    from ..presets import DEFAULT_BITS, apply_preset, preset_settings

    recipe = preset_settings(str(value), config.get("bits", DEFAULT_BITS))
    if "sym" in recipe and config.get("sym") is True:
        config = {key: field for key, field in config.items() if key != "sym"}
    return apply_preset(str(value), config)


def _paro_epochs(value: Any, _given: GivenFlags) -> dict[str, Any]:
    """``--paro-epochs ROT,FT`` as the reference's ``opt_rotation_epochs`` / ``opt_finetune_epochs``."""
    if value is None:
        return {}
    rotation, finetune = value
    return {"opt_rotation_epochs": rotation, "opt_finetune_epochs": finetune}


def _fp8_block(value: Any, _given: GivenFlags) -> dict[str, Any]:
    """``--fp8-block ROWS,COLS`` as FP8's ``weight_block_size``."""
    if value is None:
        return {}
    if len(value) != 2:
        raise FlagCombinationError(f"--fp8-block: expected ROWS,COLS, found {value}")
    return {"weight_block_size": list(value)}


#: The integer quantizers' config fields (every integer method's, a third-party method's by default).
INTEGER_FLAGS: tuple[MethodFlag, ...] = (
    method_flag(
        "--group-size",
        "columns per group, -1 per channel (default: 128)",
        type="group_size",
        default=None,
        config=lambda value, _given: {"group_size": 128 if value is None else value},
    ),
    method_flag(
        "--asym",
        "asymmetric zero points (default: symmetric)",
        action="store_true",
        config=lambda value, _given: {"sym": not value},
    ),
    method_flag(
        "--desc-act", "GPTQ act-order (columns by descending Hessian)", action="store_true", config=_switch("desc_act")
    ),
)

#: The calibrated settings every built-in calibrated method reads (qhf's readers check the values).
CALIBRATED_FLAGS: tuple[MethodFlag, ...] = (
    method_flag(
        "--damp-percent",
        "GPTQ damping (default: 0.05; qqq: 0.005)",
        type=float,
        default=None,
        config=_field("damp_percent"),
    ),
    method_flag(
        "--static-groups",
        "GPTQ group parameters from the unsolved weight",
        action="store_true",
        config=_switch("static_groups"),
    ),
    method_flag(
        "--mse", "GPTQ range search norm per group (default: 0, off)", type=float, default=None, config=_field("mse")
    ),
    method_flag(
        "--no-act-group-aware",
        "GPTQ in natural column order (default: group-aware order, as GPT-QModel)",
        action="store_true",
        config=_switch("act_group_aware", False),
    ),
    method_flag(
        "--rotation",
        "fold a rotation into the weights before quantizing (residual stream and per-head values; a randomized "
        "Hadamard, a random orthogonal matrix, or the Hadamard residual rotation optimized on the calibration rows: "
        "learned); the checkpoint stays a plain model (default: none)",
        choices=("none", "hadamard", "random", "learned"),
        default=None,
        config=_rotation,
    ),
    method_flag(
        "--rotation-seed",
        "with --rotation: the seed of its random signs / matrix (default: 0)",
        type="non_negative_int",
        default=None,
        metavar="N",
        config=_checked_elsewhere,
    ),
    method_flag(
        "--bits-budget",
        "mixed precision: average stored bits per weight (codes, scales, zeros, g_idx) the decoder-layer modules "
        "may take, e.g. 4.25; widths per module from a sensitivity pass, --bits is then the base (gptq, rtn with a "
        "GPTQ format)",
        type=float,
        default=None,
        metavar="BPW",
        config=_bits_budget,
    ),
    method_flag(
        "--bits-candidates",
        "with --bits-budget: the widths a module may get (default 3,4,8; format gptq stores 2,3,4,8)",
        type="int_list",
        default=None,
        metavar="B,B,...",
        config=_checked_elsewhere,
    ),
)

#: GPTQ's variants, adapter and recipes.
GPTQ_FLAGS: tuple[MethodFlag, ...] = (
    method_flag(
        "--gptaq",
        "GPTQ with GPTAQ's native-input term (the reference's gptaq: {alpha}; ALPHA default 0.25)",
        about="a GPTQ variant",
        type="unit_float",
        nargs="?",
        const=0.25,
        default=None,
        metavar="ALPHA",
        config=_gptaq,
    ),
    method_flag(
        "--foem",
        "GPTQ with FOEM's first-order term (the reference's foem: {alpha, beta}; BETA default 0.2)",
        about="a GPTQ variant",
        type="unit_float",
        nargs="?",
        const=0.2,
        default=None,
        metavar="BETA",
        config=_foem,
    ),
    method_flag(
        "--foem-alpha",
        "with --foem: also GPTAQ's native-input term (default: 0)",
        about="a GPTQ variant",
        type="unit_float",
        default=None,
        metavar="ALPHA",
        config=_checked_elsewhere,
    ),
    method_flag(
        "--awq-scales",
        "GPTQ on AWQ-scaled weights: AWQ's per-channel scale search folded into the previous norm or linear, then "
        "GPTQ solves the scaled weights (a plain GPTQ checkpoint; GPTQ only)",
        about="a GPTQ variant of its own",
        action="store_true",
        config=_awq_scales,
    ),
    method_flag(
        "--eora-rank",
        "after the GPTQ-family solve, an EoRA low-rank adapter of rank R per module, saved to eora/ in the "
        "checkpoint (the reference's adapter: {rank}); 0: none (what --preset best --target ENGINE adds for an engine "
        "that loads LoRA adapters is left out)",
        about="EoRA follows a GPTQ-family solve",
        type="non_negative_int",
        default=None,
        metavar="R",
        config=_eora_rank,
    ),
    method_flag(
        "--preset",
        "GPTQ recipe: reference (GPT-QModel's defaults) or best (Hadamard rotation folded in, act-order, MSE range "
        "search; at --bits 2 also asymmetric, format gptq_v2; with --target vllm or transformers+gptqmodel, engines "
        "that load LoRA adapters, also EoRA rank 32 in eora/); flags given explicitly override it",
        about="a GPTQ recipe",
        choices=("reference", "best"),
        default=None,
        config=_checked_elsewhere,
        rewrite=_preset,
    ),
)

#: ParoQuant's rotation rounds and epochs.
PAROQUANT_FLAGS: tuple[MethodFlag, ...] = (
    method_flag(
        "--krot",
        "paroquant: rotation rounds per group (default 8)",
        about="a ParoQuant setting",
        type="positive_int",
        default=None,
        metavar="N",
        config=_field("krot"),
    ),
    method_flag(
        "--paro-epochs",
        "paroquant: rotation and finetune epochs per module (default 2,1; the reference's 10,10)",
        about="a ParoQuant setting",
        type="epoch_pair",
        default=None,
        metavar="ROT,FT",
        config=_paro_epochs,
    ),
)

#: FP8's scale granularity.
FP8_FLAGS: tuple[MethodFlag, ...] = (
    method_flag(
        "--fp8-scale",
        "fp8 scale granularity (default: row; block needs --fp8-block)",
        about="an FP8 scale setting",
        integer=False,
        choices=("row", "tensor", "block"),
        default=None,
        config=_field("weight_scale_method"),
    ),
    method_flag(
        "--fp8-block",
        "fp8 block scaling size",
        about="an FP8 scale setting",
        integer=False,
        type="int_list",
        default=None,
        metavar="ROWS,COLS",
        config=_fp8_block,
    ),
)
