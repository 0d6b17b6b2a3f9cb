"""The ``lowbit quantize`` flags a method takes: :class:`MethodFlag` and the built-in methods' flag sets.

A :class:`~qhf.methods.QuantMethod` lists its flags in ``cli_flags``; the CLI adds every registered method's flags
to ``quantize``'s parser (one flag string, one declaration: two different declarations of a flag are refused naming
both methods) and refuses a flag the chosen method does not list, naming the flag and the method. A built-in
method's flag values are turned into its config by the CLI (``lowbit.cli.quantize_flags``); a third-party
method's own flags (those beyond :data:`INTEGER_FLAGS`) become settings of the flag's name (``--clip-grid 6``:
``clip_grid: 6``), checked by its closed settings class.

``kwargs`` are ``argparse.add_argument`` keywords; ``type`` may be a callable or the name of one of the CLI's value
parsers (``positive_int``, ``non_negative_int``, ``group_size``, ``unit_float``, ``int_list``, ``epoch_pair``), so
building these declarations imports nothing.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MethodFlag:
    """One ``lowbit quantize`` flag. ``about``: what it is, in the refusal of a method that does not take it
    (``--awq-scales: a GPTQ variant of its own; not with --method awq``); ``integer``: a flag of groups, zero points
    or calibration (a weight-only method refuses those together, saying so)."""

    flag: str
    help: str
    kwargs: tuple[tuple[str, Any], ...] = ()
    about: str = ""
    integer: bool = True

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


def method_flag(flag: str, help: str, *, about: str = "", integer: bool = True, **kwargs: Any) -> MethodFlag:
    """A :class:`MethodFlag` from ``argparse.add_argument`` keywords."""
    return MethodFlag(flag, help, tuple(kwargs.items()), about, integer)


#: The integer quantizers' config fields (every integer method's, a third-party method's by default).
INTEGER_FLAGS: tuple[MethodFlag, ...] = (
    method_flag("--group-size", "columns per group, -1 per channel (default: 128)", type="group_size", default=None),
    method_flag("--asym", "asymmetric zero points (default: symmetric)", action="store_true"),
    method_flag("--desc-act", "GPTQ act-order (columns by descending Hessian)", action="store_true"),
)

#: The calibrated settings every built-in calibrated method reads (qhf's readers check the values).
CALIBRATED_FLAGS: tuple[MethodFlag, ...] = (
    method_flag("--damp-percent", "GPTQ damping (default: 0.05; qqq: 0.005)", type=float, default=None),
    method_flag("--static-groups", "GPTQ group parameters from the unsolved weight", action="store_true"),
    method_flag("--mse", "GPTQ range search norm per group (default: 0, off)", type=float, default=None),
    method_flag(
        "--no-act-group-aware",
        "GPTQ in natural column order (default: group-aware order, as GPT-QModel)",
        action="store_true",
    ),
    method_flag(
        "--rotation",
        "fold a rotation into the weights before quantizing (residual stream and per-head values; a randomized "
        "Hadamard, or a random orthogonal matrix); the checkpoint stays a plain model (default: none)",
        choices=("none", "hadamard", "random"),
        default=None,
    ),
    method_flag(
        "--rotation-seed",
        "with --rotation: the seed of its random signs / matrix (default: 0)",
        type="non_negative_int",
        default=None,
        metavar="N",
    ),
    method_flag(
        "--bits-budget",
        "mixed precision: average stored bits per weight (codes, scales, zeros, g_idx) the decoder-layer modules "
        "may take, e.g. 4.25; widths per module from a sensitivity pass, --bits is then the base (gptq, rtn with a "
        "GPTQ format)",
        type=float,
        default=None,
        metavar="BPW",
    ),
    method_flag(
        "--bits-candidates",
        "with --bits-budget: the widths a module may get (default 3,4,8; format gptq stores 2,3,4,8)",
        type="int_list",
        default=None,
        metavar="B,B,...",
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
    ),
    method_flag(
        "--foem-alpha",
        "with --foem: also GPTAQ's native-input term (default: 0)",
        about="a GPTQ variant",
        type="unit_float",
        default=None,
        metavar="ALPHA",
    ),
    method_flag(
        "--awq-scales",
        "GPTQ on AWQ-scaled weights: AWQ's per-channel scale search folded into the previous norm or linear, then "
        "GPTQ solves the scaled weights (a plain GPTQ checkpoint; GPTQ only)",
        about="a GPTQ variant of its own",
        action="store_true",
    ),
    method_flag(
        "--eora-rank",
        "after the GPTQ-family solve, an EoRA low-rank adapter of rank R per module, saved to eora/ in the "
        "checkpoint (the reference's adapter: {rank})",
        about="EoRA follows a GPTQ-family solve",
        type="positive_int",
        default=None,
        metavar="R",
    ),
    method_flag(
        "--preset",
        "GPTQ recipe: reference (GPT-QModel's defaults) or best (Hadamard rotation folded in, act-order, MSE range "
        "search); flags given explicitly override it",
        about="a GPTQ recipe",
        choices=("reference", "best"),
        default=None,
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
    ),
    method_flag(
        "--paro-epochs",
        "paroquant: rotation and finetune epochs per module (default 2,1; the reference's 10,10)",
        about="a ParoQuant setting",
        type="epoch_pair",
        default=None,
        metavar="ROT,FT",
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
    ),
    method_flag(
        "--fp8-block",
        "fp8 block scaling size",
        about="an FP8 scale setting",
        integer=False,
        type="int_list",
        default=None,
        metavar="ROWS,COLS",
    ),
)
