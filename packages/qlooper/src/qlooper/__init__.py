"""Layer-by-layer calibration orchestration with resume.

Public API: :class:`ModelDefinition`/:class:`GroupSpec` (model definitions as data),
:func:`prepare_calibration`, :func:`quantize_model` → :class:`QuantizationRun`, :class:`LoopOptions` (with its
:class:`LayerLoader` hook),
the processors (:class:`GPTQProcessor`, :class:`GPTAQProcessor`, :class:`QQQProcessor`, :class:`AWQProcessor`,
:class:`WeightOnlyProcessor`), the registry they are built from by method name (:func:`make_processor`,
:func:`register_processor` for a processor of one's own) and the :class:`Processor` protocol it implements.
"""

from .api import QuantizationRun, quantize_model
from .calibration import CalibrationBatch, CalibrationSet, prepare_calibration
from .definition import GroupSpec, ModelDefinition
from .errors import (
    CalibrationError,
    CaptureError,
    DefinitionError,
    ExecutorError,
    LayerLoadError,
    PlanError,
    ProcessorError,
    QLooperError,
    ResumeError,
    RunStopped,
)
from .finalize import FinalizedModule
from .layer_loader import LayerLoader
from .loop import LoopOptions
from .processors.awq import AWQProcessor
from .processors.base import LayerContext, ModuleResult, Processor
from .processors.gptaq import GPTAQProcessor
from .processors.gptq import GPTQProcessor
from .processors.paroquant import ParoQuantProcessor
from .processors.qqq import QQQProcessor
from .processors.registry import (
    ProcessorEntry,
    make_processor,
    processor_entry,
    register_processor,
    registered_methods,
    unregister_processor,
)
from .processors.weight_only import WeightOnlyProcessor
from .report import ModuleReport

__version__ = "0.1.0"

__all__ = [
    "AWQProcessor",
    "CalibrationBatch",
    "CalibrationError",
    "CalibrationSet",
    "CaptureError",
    "DefinitionError",
    "ExecutorError",
    "FinalizedModule",
    "GPTAQProcessor",
    "GPTQProcessor",
    "GroupSpec",
    "LayerContext",
    "LayerLoadError",
    "LayerLoader",
    "LoopOptions",
    "ModelDefinition",
    "ModuleReport",
    "ModuleResult",
    "ParoQuantProcessor",
    "PlanError",
    "Processor",
    "ProcessorEntry",
    "ProcessorError",
    "QLooperError",
    "QQQProcessor",
    "QuantizationRun",
    "ResumeError",
    "RunStopped",
    "WeightOnlyProcessor",
    "__version__",
    "make_processor",
    "prepare_calibration",
    "processor_entry",
    "quantize_model",
    "register_processor",
    "registered_methods",
    "unregister_processor",
]
