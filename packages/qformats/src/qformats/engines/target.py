"""``plan_target(facts, "ENGINE[:KERNEL]", formats=...)``: settings that let that engine load the result.

Settings the quantizer still controls are adjusted, in this order of preference: keep everything; else
change the fewest settings among ``format`` (to one the kernel reads and the method can write),
``sym`` (to symmetric), ``group_size`` (the largest the kernel accepts for which every
shape rule holds; per channel last) and ``dtype`` (the kernel's first activation dtype). Bits and module
shapes are never changed: when they break a rule the target is refused with every kernel's reasons.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import QFormatsError
from .catalog import ENGINES, KERNELS, EngineKernel
from .facts import CheckpointFacts
from .report import Verdict, check_kernel
from .rules import DtypeIn, FormatIn, GroupSizeIn, SymOnly

DEFAULT_GROUPS = (128, 64, 32, -1)


class EngineTargetError(QFormatsError, ValueError):
    """An unknown ``--target``, or one no adjustment of the settings can satisfy (lists each kernel's reasons)."""


@dataclass(frozen=True)
class TargetPlan:
    """The chosen ``kernel``, the ``changes`` made (setting -> (old, new)) and the adjusted ``facts``."""

    kernel: EngineKernel
    changes: dict[str, tuple[object, object]]
    facts: CheckpointFacts


def kernels_for(target: str) -> list[EngineKernel]:
    """The kernels ``target`` names: ``ENGINE`` (all its kernels) or ``ENGINE:KERNEL``."""
    engine, _, kernel = target.partition(":")
    chosen = [k for k in KERNELS if k.engine == engine and (not kernel or k.kernel == kernel)]
    if not chosen:
        known = ", ".join(k.key for k in KERNELS)
        raise EngineTargetError(
            f"target {target!r}: unknown engine or kernel (engines: {', '.join(ENGINES)}; kernels: {known})"
        )
    return chosen


def loads_lora_adapter(target: str) -> bool:
    """Whether every kernel ``target`` (``ENGINE`` or ``ENGINE:KERNEL``) names applies a PEFT LoRA adapter saved
    beside the checkpoint (:attr:`EngineKernel.lora`: vLLM's and GPT-QModel's GPTQ / AWQ kernels do, llama.cpp does
    not), so the result loads with it whichever kernel the plan picks.

    Raises :class:`EngineTargetError` for an unknown target, naming the known ones.
    """
    return all(kernel.loads_lora for kernel in kernels_for(target))


def _rule(kernel: EngineKernel, kind: type) -> object | None:
    return next((r for r in kernel.rules if isinstance(r, kind)), None)


def _candidates(kernel: EngineKernel, facts: CheckpointFacts, formats: Sequence[str]) -> list[CheckpointFacts]:
    fmt_rule = _rule(kernel, FormatIn)
    allowed_fmts = fmt_rule.formats if isinstance(fmt_rule, FormatIn) else None
    fmts = [facts.format] + [f for f in formats if f != facts.format and (allowed_fmts is None or f in allowed_fmts)]
    groups_rule = _rule(kernel, GroupSizeIn)
    allowed = groups_rule.values if isinstance(groups_rule, GroupSizeIn) else DEFAULT_GROUPS
    ordered = sorted((g for g in allowed if g != -1), reverse=True) + ([-1] if -1 in allowed else [])
    groups = [facts.group_size] + [g for g in ordered if g != facts.group_size]
    syms = [facts.sym] + ([True] if _rule(kernel, SymOnly) and not facts.sym else [])
    dtype_rule = _rule(kernel, DtypeIn)
    dtypes = [facts.dtype]
    if isinstance(dtype_rule, DtypeIn) and facts.dtype not in dtype_rule.values:
        dtypes.append(dtype_rule.values[0])
    out = []
    for fmt, group, sym, dtype in itertools.product(fmts, groups, syms, dtypes):
        out.append(facts.changed(format=fmt, group_size=group, sym=sym, dtype=dtype))
    return out


def _changes(old: CheckpointFacts, new: CheckpointFacts) -> dict[str, tuple[object, object]]:
    names = ("format", "group_size", "sym", "dtype")
    return {n: (getattr(old, n), getattr(new, n)) for n in names if getattr(old, n) != getattr(new, n)}


def plan_target(facts: CheckpointFacts, target: str, *, formats: Sequence[str] = ()) -> TargetPlan:
    """The plan for ``target`` (see the module docstring); ``formats``: those the method can write.

    Raises :class:`EngineTargetError` when no kernel of the target can load the result.
    """
    best: TargetPlan | None = None
    refusals: list[Verdict] = []
    for kernel in kernels_for(target):
        verdict = check_kernel(kernel, facts)
        if not verdict.failures:
            return TargetPlan(kernel, {}, facts)
        found = None
        ranked = sorted(_candidates(kernel, facts, formats), key=lambda c: len(_changes(facts, c)))
        for candidate in ranked:
            if not check_kernel(kernel, candidate).failures:
                found = TargetPlan(kernel, _changes(facts, candidate), candidate)
                break
        if found is None:
            refusals.append(verdict)
        elif best is None or len(found.changes) < len(best.changes):
            best = found
    if best is not None:
        return best
    reasons = "; ".join(f"{v.kernel.key}: " + ", ".join(f.reason for f in v.failures if f.blocking) for v in refusals)
    raise EngineTargetError(f"target {target!r}: no setting change lets it load this model ({reasons})")
