"""``check_engines(facts)``: per engine and kernel, whether it can load the checkpoint, and every rule that fails."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .catalog import KERNELS, EngineKernel
from .facts import GGUF, CheckpointFacts
from .rules import GGUFFileOnly

_NOT_A_DIRECTORY = "reads safetensors checkpoint directories; a single .gguf file is not one"


@dataclass(frozen=True)
class RuleFailure:
    """A failed rule: its ``rule`` text, the ``reason`` for these facts, and whether it stops the load."""

    rule: str
    reason: str
    blocking: bool


@dataclass(frozen=True)
class Verdict:
    """One engine kernel's answer for one checkpoint."""

    kernel: EngineKernel
    failures: tuple[RuleFailure, ...]

    @property
    def loads(self) -> bool:
        """True when no blocking rule fails (a dtype note may remain)."""
        return not any(f.blocking for f in self.failures)

    def to_dict(self) -> dict[str, object]:
        return {
            "engine": self.kernel.engine,
            "kernel": self.kernel.kernel,
            "loads": self.loads,
            "failures": [{"rule": f.rule, "reason": f.reason, "blocking": f.blocking} for f in self.failures],
            "requires": self.kernel.requires,
        }


def check_kernel(kernel: EngineKernel, facts: CheckpointFacts) -> Verdict:
    """Every rule of ``kernel`` applied to ``facts``; a kernel that reads safetensors directories answers a
    ``.gguf`` file with that one reason (its other rules describe tensors it would never open)."""
    if facts.container == GGUF and not any(isinstance(rule, GGUFFileOnly) for rule in kernel.rules):
        return Verdict(kernel, (RuleFailure("a safetensors checkpoint directory", _NOT_A_DIRECTORY, True),))
    failures = []
    for rule in kernel.rules:
        reason = rule.check(facts)
        if reason is not None:
            failures.append(RuleFailure(rule.rule, reason, rule.blocking))
    return Verdict(kernel, tuple(failures))


def check_engines(facts: CheckpointFacts, kernels: Sequence[EngineKernel] = KERNELS) -> list[Verdict]:
    """One :class:`Verdict` per kernel, in catalog order."""
    return [check_kernel(kernel, facts) for kernel in kernels]


def format_report(verdicts: Sequence[Verdict]) -> str:
    """Text lines: ``engine:kernel  loads|no  reason; reason`` (blocking reasons first, then notes)."""
    width = max((len(v.kernel.key) for v in verdicts), default=0)
    lines = []
    for v in verdicts:
        blocking = [f.reason for f in v.failures if f.blocking]
        notes = [f"note: {f.reason}" for f in v.failures if not f.blocking]
        status = "loads" if v.loads else "no   "
        detail = "; ".join(blocking + notes)
        lines.append(f"{v.kernel.key:<{width}}  {status}  {detail}".rstrip())
    return "\n".join(lines)
