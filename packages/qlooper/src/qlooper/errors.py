"""The qlooper exception hierarchy.

One root, :class:`QLooperError`; every leaf also subclasses the builtin that fits so callers that
catch ``ValueError``/``RuntimeError`` keep working.
"""

from __future__ import annotations


class QLooperError(Exception):
    """Root of every error raised by qlooper."""


class DefinitionError(QLooperError, ValueError):
    """A model definition does not match the model (names the path and what was found)."""


class CalibrationError(QLooperError, ValueError):
    """Calibration data is empty, malformed or entirely filtered out (says how many rows and why)."""


class CaptureError(QLooperError, RuntimeError):
    """First-layer input capture failed (the model forward never reached the first decoder layer)."""


class ProcessorError(QLooperError, RuntimeError):
    """A processor was misconfigured or could not process a module (names the module)."""


class PlanError(QLooperError, ValueError):
    """A loop plan, step or extension cursor is inconsistent."""


class ResumeError(QLooperError, RuntimeError):
    """A checkpoint cannot be used to resume this run (names the differing identity fields)."""


class RunStopped(QLooperError, RuntimeError):
    """A cooperative stop (SIGINT/SIGTERM) was honoured after committing a checkpoint at a boundary.

    ``cursor`` is the plan position the next attempt resumes from.
    """

    def __init__(self, message: str, cursor: int) -> None:
        super().__init__(message)
        self.cursor = cursor


class LayerLoadError(QLooperError, RuntimeError):
    """A ``LoopOptions.layer_loader`` failed to load or release a layer (names the layer and the call)."""


class ExecutorError(QLooperError, RuntimeError):
    """An executor cannot run a call (Ray missing, a worker lost twice in one call: names the worker)."""


class StopForward(QLooperError):
    """Raised by a hook to end a forward early; only the loop that installed the hook swallows it."""


class SegmentsLost(QLooperError, RuntimeError):
    """A worker was asked to add segment sums it does not hold (a replacement for a lost worker): the driver
    captures the group again (the chained reduce, :meth:`qlooper.shard_worker.LayerWorker.chain`)."""
