"""The public entry point: ``quantize_model(model, definition, calibration, spec, method, ...)``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qalgos.gptaq import AsymmetricSpec, foem_defaults, gptaq_defaults
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
from .processors.awq import AWQProcessor
from .processors.base import Processor
from .processors.gptaq import GPTAQProcessor
from .processors.gptq import GPTQProcessor
from .processors.paroquant import ParoQuantProcessor
from .processors.qqq import QQQProcessor
from .processors.weight_only import WeightOnlyProcessor
from .report import ModuleReport, write_report_csv, write_report_json
from .resume import run_with_checkpoint


@dataclass
class QuantizationRun:
    """What a run gives back: per module name the finalized module (logical weight, packed tensors) and report.

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


def make_processor(
    method: str, spec: QuantSpec | WeightOnlySpec | ParoSpec, terms: AsymmetricSpec | None = None
) -> Processor:
    """The built-in processor for ``method`` (``"gptq"``, ``"gptaq"``, ``"foem"``, ``"qqq"``, ``"awq"``, ``"rtn"``,
    ``"paroquant"`` with a qalgos ``ParoSpec``, or a ``WeightOnlySpec`` family). ``terms``: GPTAQ/FOEM's
    alpha/beta (default: the reference's defaults)."""
    if method == "paroquant" or isinstance(spec, ParoSpec):
        if method != "paroquant" or not isinstance(spec, ParoSpec):
            raise ProcessorError(f"method: 'paroquant' runs with a qalgos ParoSpec, found {method!r} with {spec!r}")
        return ParoQuantProcessor(spec)
    if isinstance(spec, WeightOnlySpec):
        if method not in ("weight_only", spec.family):
            raise ProcessorError(f"method: a WeightOnlySpec({spec.family!r}) runs as {spec.family!r}, found {method!r}")
        return WeightOnlyProcessor(spec)
    if method == "gptq":
        return GPTQProcessor(spec)
    if method in ("gptaq", "foem"):
        if terms is None:
            terms = gptaq_defaults() if method == "gptaq" else foem_defaults()
        if terms.method != method:
            raise ProcessorError(f"terms: method {method!r} got {terms.method!r} terms")
        return GPTAQProcessor(spec, terms)
    if method == "qqq":
        return QQQProcessor(spec)
    if method == "awq":
        return AWQProcessor(spec)
    if method == "rtn":
        return WeightOnlyProcessor(spec)
    raise ProcessorError(
        f"method: expected 'gptq', 'gptaq', 'foem', 'qqq', 'awq', 'rtn', 'paroquant' or a processor object, "
        f"found {method!r}"
    )


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

    ``method`` is ``"gptq"``, ``"awq"``, ``"rtn"``, ``"paroquant"`` (with a qalgos ``ParoSpec``) or a processor
    object (then ``spec`` may be None); with a
    qalgos ``WeightOnlySpec`` it is its family (``"fp8"``, ``"bnb4"``, ``"int8"``, ``"gguf"``) or ``"weight_only"``.
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
        dict(state.finalized),
        list(state.reports),
        state.plan,
        fmt,
        state.start_cursor,
        lockstep_skipped=dict(state.lockstep_skipped),
    )
