"""Validation findings: every broken rule, with a stable id, the tensor and expected vs found."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    """One broken rule. ``rule`` is a stable id (e.g. ``GPTQ-SHAPE-QWEIGHT``, ``AWQ-004``)."""

    rule: str
    tensor: str
    expected: str
    found: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.tensor}: expected {self.expected}, found {self.found}"
