"""``inspect(path)``: a summary of a quantized checkpoint directory, and ``python -m qformats.inspect``.

The summary holds the method, format and layout, bits, group size, symmetry, the zero-point convention
the stored words are consistent with (GPTQ family: measured by :mod:`qformats.zero_convention`;
AWQ: true zeros by rule AWQ-005; GPTQ Marlin: the implicit ``2**(bits-1)``), every quantized module
with its layout, dimensions, tensor shapes and dtypes and violations, violations outside any module
(``CONFIG-EXCLUDED`` packed tensors under a negative dynamic rule, ``CONFIG-LAYERS``), warnings (unknown
tensors inside quantized modules ...), the dense tensors, the files and their total tensor size, and the LoRA
(EoRA) adapter the config names, if any (:mod:`qformats.adapter_summary`: its problems count as violations).
``--json`` prints the same as JSON. Exit status: 0 clean, 1 violations found, 2 unreadable checkpoint.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .adapter_summary import adapter_summary
from .checkpoint.config_files import find_quant_config
from .checkpoint.family_modules import is_family
from .checkpoint.reader import Checkpoint
from .checkpoint.weight_only_modules import is_weight_only, module_tensor_names, weight_only_modules
from .errors import QFormatsError
from .layouts.families import families_of_method, get_family
from .zero_convention import detect_zero_convention

GPTQ_FAMILY = ("gptq", "gptq_v2", "gptq_p")
ZERO_PROBE_MODULES = 4


@dataclass
class ModuleSummary:
    """One quantized module: layout, logical dims and its tensors' ``[shape, dtype]``."""

    name: str
    layout: str
    bits: int
    group_size: int
    sym: bool
    in_features: int
    out_features: int
    tensors: dict[str, list[object]]
    violations: list[str] = field(default_factory=list)
    #: Weight-only modules: the stored type (``Q6_K``, ``float8_e4m3fn row``, ``nf4 block 64``) and bytes.
    qtype: str | None = None
    nbytes: int | None = None


@dataclass
class CheckpointSummary:
    """What :func:`inspect` reports (see the module docstring)."""

    path: str
    config_file: str
    method: str
    format: str
    layout: str
    bits: int
    group_size: int
    sym: bool
    zero_convention: dict[str, object]
    modules: list[ModuleSummary]
    dense_tensors: int
    files: list[str]
    total_size: int
    warnings: list[str]
    other_violations: list[str] = field(default_factory=list)
    #: Weight-only checkpoints: stored type -> ``[modules, bytes]``.
    types: dict[str, list[int]] = field(default_factory=dict)
    #: The adapter the config names (:func:`qformats.adapter_summary.adapter_summary`), or None.
    adapter: dict[str, object] | None = None

    @property
    def violation_count(self) -> int:
        return sum(len(m.violations) for m in self.modules) + len(self.other_violations)

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["violation_count"] = self.violation_count
        return data


def _zero_convention(ck: Checkpoint) -> dict[str, object]:
    layout = ck.fields.layout
    if layout in GPTQ_FAMILY:
        reports = []
        for entry in ck.modules()[:ZERO_PROBE_MODULES]:
            report = detect_zero_convention(
                ck.module_tensors(entry), entry.meta, labelled=layout, planar=layout == "gptq_p"
            )
            reports.append(report)
        if not reports:
            return {"convention": "undecided", "confidence": "none", "evidence": "no quantized modules"}
        best = reports[0]
        agree = all(r.convention == best.convention for r in reports)
        return {
            "convention": best.convention if agree else "mixed",
            "confidence": best.confidence if agree else "low",
            "evidence": f"{len(reports)} module(s) probed; first: {best.evidence}",
            "label": layout,
            "label_disagrees": agree and best.label_disagrees,
        }
    if is_family(layout):  # QQQ, ParoQuant, VPTQ, EXL3: the family says how it holds zeros
        return {"convention": "n/a", "confidence": "certain", "evidence": get_family(layout).zeros}
    if layout == "marlin":
        return {"convention": "implicit", "confidence": "certain", "evidence": "GPTQ Marlin zero is 2**(bits-1)"}
    return {
        "convention": "v2",
        "confidence": "certain",
        "evidence": f"{layout} stores the true zero that dequantization subtracts (AWQ-005)",
    }


def _weight_only_zeros(method: str) -> str:
    """How a weight-only method's family holds its zero point (the note of ``method``'s first family)."""
    return families_of_method(method)[0].zeros


def _inspect_weight_only(ck: Checkpoint) -> CheckpointSummary:
    """The summary of an FP8 / bitsandbytes / GGUF directory (:mod:`.checkpoint.weight_only_modules`)."""
    found = weight_only_modules(ck)
    modules = [
        ModuleSummary(
            m.name, ck.fields.method, m.bits, -1, True, m.in_features, m.out_features, m.tensors, m.violations,
            m.qtype, m.nbytes,
        )
        for m in found
    ]  # fmt: skip
    types: dict[str, list[int]] = {}
    for m in found:
        tally = types.setdefault(m.qtype, [0, 0])
        tally[0] += 1
        tally[1] += m.nbytes
    stored = module_tensor_names(ck, found)
    f = ck.fields
    return CheckpointSummary(
        path=str(ck.root),
        config_file=f.source_file,
        method=f.method,
        format=f.format,
        layout=f.method,
        bits=f.bits,
        group_size=-1,
        sym=True,
        zero_convention={"convention": "n/a", "confidence": "certain", "evidence": _weight_only_zeros(f.method)},
        modules=modules,
        dense_tensors=len([n for n in ck.weight_map if n not in stored]),
        files=sorted(ck.files),
        total_size=ck.total_size(),
        warnings=list(ck.warnings),
        types=dict(sorted(types.items())),
    )


def inspect(path: str | Path) -> CheckpointSummary:
    """Open, validate every module and summarize the checkpoint at ``path``."""
    ck = Checkpoint(path)
    summary = _inspect_weight_only(ck) if is_weight_only(ck) else _inspect_modules(ck)
    config_path, raw = find_quant_config(ck.root)
    summary.adapter, problems = adapter_summary(ck.root, raw, config_path.name)
    summary.other_violations.extend(problems)
    return summary


def _inspect_modules(ck: Checkpoint) -> CheckpointSummary:
    """The summary of a checkpoint of quantized modules (GPTQ, AWQ and the other packed families)."""
    problems = ck.validate()
    modules = []
    for entry in ck.modules():
        shapes: dict[str, list[object]] = {}
        for suffix, name in entry.tensors.items():
            shape, dtype = ck.shape_of(name)
            shapes[suffix] = [list(shape), dtype]
        m = entry.meta
        modules.append(
            ModuleSummary(
                entry.prefix,
                entry.layout,
                m.bits,
                m.group_size,
                m.sym,
                m.in_features,
                m.out_features,
                shapes,
                [str(v) for v in problems.get(entry.prefix, [])],
            )
        )
    f = ck.fields
    return CheckpointSummary(
        path=str(ck.root),
        config_file=f.source_file,
        method=f.method,
        format=f.format,
        layout=f.layout,
        bits=f.bits,
        group_size=f.group_size,
        sym=f.sym,
        zero_convention=_zero_convention(ck),
        modules=modules,
        dense_tensors=len(ck.dense_names(strict=False)),
        files=sorted(ck.files),
        total_size=ck.total_size(),
        warnings=list(ck.warnings),
        other_violations=[
            str(v)
            for prefix, found in problems.items()
            if prefix not in {e.prefix for e in ck.modules()}
            for v in found
        ],
    )


def format_text(summary: CheckpointSummary) -> str:
    """A human-readable report of ``summary``."""
    zc = summary.zero_convention
    lines = [
        f"checkpoint   {summary.path}",
        f"config       {summary.config_file}",
        f"method       {summary.method}    format {summary.format}    layout {summary.layout}",
        f"bits         {summary.bits}    group_size {summary.group_size}    sym {summary.sym}",
        f"zeros        {zc.get('convention')} ({zc.get('confidence')}): {zc.get('evidence')}",
        f"files        {len(summary.files)}    total size {summary.total_size} bytes",
        f"modules      {len(summary.modules)} quantized, {summary.dense_tensors} dense tensors",
        f"violations   {summary.violation_count}",
    ]
    if zc.get("label_disagrees"):
        lines.append(f"WARNING      the words are {zc['convention']} but the label says {zc.get('label')}")
    lines.extend(f"WARNING      {w}" for w in summary.warnings)
    lines.extend(f"  ! {v}" for v in summary.other_violations)
    if summary.adapter is not None:
        a = summary.adapter
        lines.append(
            f"adapter      {a.get('name')} rank {a.get('rank')} in {a.get('path')}/: {a.get('modules', 0)} modules, "
            f"{a.get('bytes', 0)} bytes, target_modules {a.get('target_modules')}"
        )
    if summary.types:
        tallies = ", ".join(f"{t} {n} modules {size} bytes" for t, (n, size) in summary.types.items())
        lines.append(f"types        {tallies}")
    lines.append("")
    for m in summary.modules:
        tensors = ", ".join(f"{k} {v[0]} {v[1]}" for k, v in m.tensors.items())
        kind = f"{m.layout} {m.qtype}" if m.qtype is not None else f"{m.layout} {m.bits}-bit g{m.group_size}"
        lines.append(f"  {m.name}  [{m.out_features} x {m.in_features}] {kind}: {tensors}")
        lines.extend(f"    ! {v}" for v in m.violations)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m qformats.inspect PATH [--json]``."""
    parser = argparse.ArgumentParser(prog="python -m qformats.inspect", description="Summarize a quantized checkpoint.")
    parser.add_argument("path", help="checkpoint directory")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = parser.parse_args(argv)
    try:
        summary = inspect(args.path)
    except QFormatsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary.to_dict(), indent=2) if args.json else format_text(summary))
    return 1 if summary.violation_count else 0


if __name__ == "__main__":
    sys.exit(main())
