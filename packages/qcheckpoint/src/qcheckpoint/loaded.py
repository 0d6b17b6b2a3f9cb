"""What :meth:`CheckpointStore.load` returns: one verified generation plus accessors to its objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .continuation import decode_continuation
from .errors import CheckpointError
from .objects import ObjectStore


@dataclass(frozen=True)
class SkippedGeneration:
    """A generation named in CURRENT that was passed over because it failed verification."""

    generation: str
    reason: str


@dataclass(frozen=True)
class LoadedGeneration:
    """A complete published generation: its manifest fields and readers for its (verified) objects.

    ``cursor`` is the int the run committed; ``artifacts`` maps artifact names to object names; ``skipped``
    lists newer generations that were corrupt (newest first), empty when the newest one loaded.
    """

    generation: str
    identity: dict[str, Any]
    cursor: int
    continuation: str
    artifacts: dict[str, str]
    skipped: tuple[SkippedGeneration, ...] = ()
    _objects: ObjectStore | None = field(default=None, repr=False, compare=False)

    def _store(self) -> ObjectStore:
        if self._objects is None:
            raise CheckpointError("this LoadedGeneration is detached from its store")
        return self._objects

    def object_path(self, name: str) -> Path:
        """Path of an object of this store (verified at load time; re-verified by :meth:`read_object`)."""
        return self._store().path(name, f"generation {self.generation}")

    def read_object(self, name: str) -> bytes:
        """The bytes of object ``name``, re-hashed against its name."""
        return self._store().read(name, f"generation {self.generation}")

    def artifact_path(self, artifact: str) -> Path:
        """Path of the object holding artifact ``artifact``; unknown names raise ``KeyError`` listing known ones."""
        if artifact not in self.artifacts:
            raise KeyError(
                f"generation {self.generation} has no artifact {artifact!r}; known: {sorted(self.artifacts)}"
            )
        return self.object_path(self.artifacts[artifact])

    def read_continuation(self) -> bytes:
        """The continuation object's bytes (verified)."""
        return self.read_object(self.continuation)

    def decode_continuation(self) -> Any:
        """The continuation's value tree, tensors restored to their recorded devices."""
        return decode_continuation(self.read_continuation())
