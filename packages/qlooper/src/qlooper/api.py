"""The public entry point: ``quantize_model(model, definition, calibration, spec, method, ...)``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qalgos.paroquant import ParoSpec
from qalgos.spec import QuantSpec
from qalgos.weight_only import WeightOnlySpec
from qformats.config.quantizer_formats import default_format
from torch import nn

from .calibration import CalibrationSet
from .definition import ModelDefinition
from .errors import ProcessorError
from .finalize import FinalizedModule
from .loop import LayerLoop, LoopOptions
from .plan import LoopPlan
from .processors.base import Processor
from .processors.registry import make_processor
from .report import ModuleReport, write_report_csv, write_report_json
from .resume import run_with_checkpoint


@dataclass
class QuantizationRun:
    """What a run gives back: per module name the finalized module (logical weight, packed tensors) and report.

    ``modules`` is in solve order, the order of ``report`` (the same on every run of the same inputs).

    ``resumed_from`` is the plan cursor restored from a checkpoint (0 for a fresh run). ``lockstep_skipped``:
    layer name -> why it ran per-group forwards instead of lockstep (``LoopOptions.lockstep_budget``).
    """

    modules: dict[str, FinalizedModule]
    report: list[ModuleReport]
    plan: LoopPlan
    format: str
    resumed_from: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    lockstep_skipped: dict[str, str] = field(default_factory=dict)

    def report_for(self, name: str) -> ModuleReport:
        for row in self.report:
            if row.module == name:
                return row
        raise KeyError(f"no report row for module {name!r}")

    def write_report(self, path: str | Path) -> Path:
        """Write the report as CSV (``.csv``) or JSON (``.json``)."""
        target = Path(path)
        if target.suffix == ".csv":
            return write_report_csv(self.report, target)
        if target.suffix == ".json":
            return write_report_json(self.report, target)
        raise ValueError(f"write_report: expected a .csv or .json path, found {target.name!r}")


def quantize_model(
    model: nn.Module,
    definition: ModelDefinition,
    calibration: CalibrationSet | None = None,
    spec: QuantSpec | WeightOnlySpec | ParoSpec | None = None,
    method: str | Processor = "gptq",
    *,
    format: str | None = None,
    checkpoint: Any = None,
    options: LoopOptions | None = None,
) -> QuantizationRun:
    """Quantize every module the definition names, layer by layer; the model is mutated in place.

    ``method`` is a registered method name (:mod:`qlooper.processors.registry`: ``"gptq"``, ``"gptaq"``,
    ``"foem"``, ``"qqq"``, ``"awq"``, ``"rtn"`` with a qalgos ``QuantSpec``; ``"paroquant"`` with a ``ParoSpec``;
    a ``WeightOnlySpec``'s family ``"fp8"``, ``"bnb4"``, ``"int8"``, ``"gguf"`` or ``"weight_only"``; a third
    party's own via ``register_processor``) or a processor object (then ``spec`` may be None).
    ``format`` is the qformats layout key the modules are packed into (default per method:
    ``qformats.config.default_format``: gptq/gptaq/foem → "gptq", qqq → "qqq", awq → "gemm", rtn → "gptq",
    paroquant → "paroquant"; a ``WeightOnlySpec`` packs into its family key). ``checkpoint`` is a
    ``qcheckpoint.CheckpointConfig`` enabling resume.
    """
    options = options or LoopOptions()
    if isinstance(method, str):
        if spec is None:
            raise ProcessorError(f"spec: method {method!r} needs a qalgos QuantSpec; none was given")
        processor = make_processor(method, spec)
        if format is not None:
            fmt = format
        elif isinstance(spec, WeightOnlySpec):
            fmt = processor.method  # the weight-only family key ("fp8", "bnb4", "int8", "gguf")
        else:
            fmt = default_format(method)  # qformats' one table (gptaq/foem write gptq)
    else:
        processor = method
        if format is None:
            raise ProcessorError("format: a custom processor needs an explicit target format")
        fmt = format
    loop = LayerLoop(model, definition, processor, format=fmt, options=options, extensions=options.extensions)
    if checkpoint is not None:
        state = run_with_checkpoint(loop, calibration, checkpoint, list(options.extensions))
    else:
        state = loop.run(calibration)
    return QuantizationRun(
        _in_report_order(state.finalized, state.reports),
        list(state.reports),
        state.plan,
        fmt,
        state.start_cursor,
        lockstep_skipped=dict(state.lockstep_skipped),
    )


def _in_report_order(finalized: dict[str, FinalizedModule], reports: list[ModuleReport]) -> dict[str, FinalizedModule]:
    """``finalized`` in the order the modules were solved (the report's rows), not the order the background
    finalizers happened to finish, so that files listing the modules are the same on every run; modules
    without a report row keep their order after them."""
    ordered = {row.module: finalized[row.module] for row in reports if row.module in finalized}
    ordered.update((name, done) for name, done in finalized.items() if name not in ordered)
    return ordered
