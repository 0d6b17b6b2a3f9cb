"""The engine-compatibility lines ``inspect``, ``quantize`` and ``quickstart`` print (``qformats.engines``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def directory_verdicts(path: str | Path, summary: Any = None) -> list[Any]:
    """One ``qformats.engines.Verdict`` per engine kernel for the checkpoint directory ``path``
    (``summary``: its ``qformats.inspect`` result when already computed)."""
    from qformats.engines import check_engines, facts_from_summary
    from qformats.inspect import inspect

    return check_engines(facts_from_summary(summary if summary is not None else inspect(Path(path))))


def engines_text(verdicts: list[Any]) -> str:
    """``engines`` heading, the one-line summary of who loads it, and one line per kernel."""
    from qformats.engines import format_report

    loads = [v.kernel.key for v in verdicts if v.loads]
    head = f"engines      loaded by {len(loads)} of {len(verdicts)} engine kernels: {', '.join(loads) or 'none'}"
    indented = "\n".join(f"  {line}" for line in format_report(verdicts).splitlines())
    return f"{head}\n{indented}"


def target_changes_text(target: str, plan: Any) -> str:
    """``target  vllm:gptq: group_size 128 -> 64`` (or ``as requested`` when nothing changes)."""
    if not plan.changes:
        return f"target       {target}: {plan.kernel.key} loads the settings as requested"
    changed = ", ".join(f"{name} {old} -> {new}" for name, (old, new) in plan.changes.items())
    return f"target       {target}: adjusted for {plan.kernel.key}: {changed}"
