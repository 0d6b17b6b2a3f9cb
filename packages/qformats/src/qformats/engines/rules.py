"""One engine load rule per class: ``check(facts)`` returns None when the rule holds, else why it fails.

Every rule names the setting an adjustment could change (``setting``: ``format``, ``bits``, ``group_size``,
``sym``, ``dtype``, ``container``) and whether breaking it stops the load (``blocking``;
a dtype rule is not blocking: engines cast the dense weights when told which dtype to run in).
Shape failures name the first failing module and how many fail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from .facts import GGUF, CheckpointFacts, LinearShape


def _shape_failure(
    facts: CheckpointFacts, bad: Callable[[LinearShape], bool], what: Callable[[LinearShape], str]
) -> str | None:
    failing = [m for m in facts.modules if bad(m)]
    if not failing:
        return None
    first = failing[0]
    more = f" (and {len(failing) - 1} more of {len(facts.modules)} modules)" if len(failing) > 1 else ""
    return f"{first.name}: {what(first)}{more}"


def _values(values: tuple[object, ...]) -> str:
    return ", ".join(str(v) for v in values)


@dataclass(frozen=True)
class FormatIn:
    """The kernel reads only these checkpoint formats."""

    formats: tuple[str, ...]
    setting = "format"
    blocking = True

    @property
    def rule(self) -> str:
        return f"format in {{{_values(self.formats)}}}"

    def check(self, facts: CheckpointFacts) -> str | None:
        if facts.format in self.formats:
            return None
        return f"format {facts.format!r} is not read by this kernel (it reads {_values(self.formats)})"


@dataclass(frozen=True)
class BitsIn:
    """Supported code widths."""

    values: tuple[int, ...]
    setting = "bits"
    blocking = True

    @property
    def rule(self) -> str:
        return f"bits in {{{_values(self.values)}}}"

    def check(self, facts: CheckpointFacts) -> str | None:
        if facts.bits not in self.values:
            return f"bits {facts.bits} not in {{{_values(self.values)}}}"
        return _shape_failure(
            facts,
            lambda m: facts.module_bits(m) not in self.values,
            lambda m: f"{facts.module_bits(m)}-bit (a dynamic rule) not in {{{_values(self.values)}}}",
        )


@dataclass(frozen=True)
class GroupSizeIn:
    """Supported group sizes (-1: per channel); ``full_k``: a group spanning all of K is also accepted."""

    values: tuple[int, ...]
    full_k: bool = False
    setting = "group_size"
    blocking = True

    @property
    def rule(self) -> str:
        return f"group_size in {{{_values(self.values)}}}"

    def check(self, facts: CheckpointFacts) -> str | None:
        if facts.group_size in self.values:
            return None
        if self.full_k and facts.modules and all(m.in_features == facts.group_size for m in facts.modules):
            return None
        return f"group_size {facts.group_size} not in {{{_values(self.values)}}}"


@dataclass(frozen=True)
class SymOnly:
    """Symmetric codes only (no stored zero points: the kernel's types are uint4b8 / uint8b128)."""

    setting = "sym"
    blocking = True
    rule = "sym = true"

    def check(self, facts: CheckpointFacts) -> str | None:
        return None if facts.sym else "asymmetric (sym = false) codes; the kernel takes symmetric ones only"


@dataclass(frozen=True)
class InDivisible:
    """K of every module divisible by ``by`` (a kernel tile)."""

    by: int
    setting = "group_size"  # not changeable by settings; named so that plans report it next to groups
    blocking = True

    @property
    def rule(self) -> str:
        return f"K % {self.by} == 0"

    def check(self, facts: CheckpointFacts) -> str | None:
        return _shape_failure(
            facts, lambda m: m.in_features % self.by != 0, lambda m: f"K={m.in_features} not divisible by {self.by}"
        )


@dataclass(frozen=True)
class OutDivisible:
    """N of every module divisible by ``by`` (a kernel tile)."""

    by: int
    setting = "group_size"
    blocking = True

    @property
    def rule(self) -> str:
        return f"N % {self.by} == 0"

    def check(self, facts: CheckpointFacts) -> str | None:
        return _shape_failure(
            facts, lambda m: m.out_features % self.by != 0, lambda m: f"N={m.out_features} not divisible by {self.by}"
        )


@dataclass(frozen=True)
class OutDivisibleByPackFactor:
    """N divisible by the numerator of ``32 / bits`` (codes per int32 word: 8 at 4 bits, 32 at 3 bits)."""

    setting = "bits"
    blocking = True
    rule = "N % numerator(32/bits) == 0"

    def check(self, facts: CheckpointFacts) -> str | None:
        def by(m: LinearShape) -> int:
            return Fraction(32, facts.module_bits(m)).numerator

        return _shape_failure(
            facts, lambda m: m.out_features % by(m) != 0, lambda m: f"N={m.out_features} not divisible by {by(m)}"
        )


@dataclass(frozen=True)
class InDivisibleByGroup:
    """K of every module divisible by the group size (no partial last group); per channel passes.

    ``below_k_only``: a group size of K or more passes (Marlin's condition: ``group_size < input_size``);
    otherwise a group larger than K fails too (``K % group_size`` is K then).
    """

    below_k_only: bool = False
    setting = "group_size"
    blocking = True
    rule = "K % group_size == 0"

    def check(self, facts: CheckpointFacts) -> str | None:
        g = facts.group_size
        if g == -1:
            return None
        return _shape_failure(
            facts,
            lambda m: m.in_features % g != 0 and not (self.below_k_only and g >= m.in_features),
            lambda m: f"K={m.in_features} not divisible by group_size {g}",
        )


@dataclass(frozen=True)
class DtypeIn:
    """Activation dtypes of the kernel; the checkpoint's ``config.json`` dtype should be one of them."""

    values: tuple[str, ...]
    setting = "dtype"
    blocking = False

    @property
    def rule(self) -> str:
        return f"dtype in {{{_values(self.values)}}}"

    def check(self, facts: CheckpointFacts) -> str | None:
        if facts.dtype in self.values:
            return None
        return (
            f"config dtype {facts.dtype or 'unstated'} is not among the kernel's activation dtypes "
            f"({_values(self.values)}); the engine must be told to run in one of them"
        )


@dataclass(frozen=True)
class GGUFFileOnly:
    """The engine reads single ``.gguf`` files, not safetensors checkpoint directories."""

    setting = "container"
    blocking = True
    rule = "a .gguf file"

    def check(self, facts: CheckpointFacts) -> str | None:
        if facts.container == GGUF:
            return None
        return "reads .gguf files only; a safetensors checkpoint directory is not one"


Rule = (
    FormatIn
    | BitsIn
    | GroupSizeIn
    | SymOnly
    | InDivisible
    | OutDivisible
    | OutDivisibleByPackFactor
    | InDivisibleByGroup
    | DtypeIn
    | GGUFFileOnly
)
