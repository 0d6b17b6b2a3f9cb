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


def gguf_file_verdicts(path: str | Path) -> list[Any]:
    """One ``qformats.engines.Verdict`` per engine kernel for the single ``.gguf`` file ``path``: its 2-D
    block-quantized tensors are the modules; ``bits`` and ``group_size`` are those of the most common block
    type (Q4_1: 4 bits, blocks of 32), so a safetensors kernel's refusal names what the file holds."""
    from collections import Counter

    from qformats.engines import CheckpointFacts, LinearShape, check_engines
    from qformats.engines.facts import GGUF
    from qformats.gguf_file import GGUFReader

    reader = GGUFReader(Path(path))
    blocks = [t for t in reader.tensors.values() if len(t.dims) == 2 and t.type.block_size > 1]
    modules = tuple(LinearShape(t.name, t.dims[0], t.dims[1]) for t in blocks)
    common = Counter(t.type for t in blocks).most_common(1)
    kind = common[0][0] if common else None
    digits = "".join(ch for ch in (kind.name.split("_")[0] if kind else "") if ch.isdigit())
    facts = CheckpointFacts(
        format="gguf",
        bits=int(digits) if digits else 16,
        group_size=kind.block_size if kind else -1,
        sym=False,
        desc_act=False,
        dtype=None,
        modules=modules,
        container=GGUF,
    )
    return check_engines(facts)


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
