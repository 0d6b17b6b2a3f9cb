"""Transactional, crash-proof checkpoint store and pickle-free continuation codec.

See docs/checkpointing.md. Public API: :class:`CheckpointConfig`, :class:`CheckpointStore` (a context manager
holding the exclusive writer lease), :class:`LoadedGeneration`, :class:`CollectReport`, the continuation codec
(:func:`encode_continuation`, :func:`decode_continuation`, :class:`ContinuationCodec`), the cooperative stop
helper (:func:`cooperative_stop`) and the exception hierarchy rooted at :class:`CheckpointError`.
"""

from .collect import CollectReport
from .config import CheckpointConfig
from .continuation import ContinuationCodec, decode_continuation, encode_continuation
from .errors import (
    CheckpointConfigError,
    CheckpointCorrupt,
    CheckpointError,
    CheckpointLeaseError,
    CheckpointStopped,
    CommitError,
    ContinuationError,
    IdentityMismatchError,
    ResumePolicyError,
)
from .faults import FaultHook
from .loaded import LoadedGeneration, SkippedGeneration
from .stop import CooperativeStopError, StopRequest, cooperative_stop
from .store import CheckpointStore

__version__ = "0.1.0"

__all__ = [
    "CheckpointConfig",
    "CheckpointConfigError",
    "CheckpointCorrupt",
    "CheckpointError",
    "CheckpointLeaseError",
    "CheckpointStopped",
    "CheckpointStore",
    "CollectReport",
    "CommitError",
    "ContinuationCodec",
    "ContinuationError",
    "CooperativeStopError",
    "FaultHook",
    "IdentityMismatchError",
    "LoadedGeneration",
    "ResumePolicyError",
    "SkippedGeneration",
    "StopRequest",
    "__version__",
    "cooperative_stop",
    "decode_continuation",
    "encode_continuation",
]
