"""The loop plan, its steps, and the extension protocol run at every step boundary.

* :class:`LoopStep` ``(kind, index, name)`` identifies one unit of work (today: one decoder layer).
* :class:`LoopPlan` is the immutable tuple of steps; a *cursor* is a position in it (0..len).
* Extensions get ``on_start(context) -> cursor | None`` once and ``on_boundary(boundary)`` after each
  step. A :class:`LoopBoundary` is borrowed: valid only during the callback on the orchestration thread;
  ``quiesce()`` waits for every pending finalizer and raises the first failure after all have settled.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .errors import PlanError

if TYPE_CHECKING:
    from .processors.base import Processor


@dataclass(frozen=True)
class LoopStep:
    """One planned step: ``kind`` (``"layer"``), ``index`` (layer index), ``name`` (dotted layer path)."""

    kind: str
    index: int
    name: str

    def describe(self) -> dict[str, object]:
        return {"kind": self.kind, "index": self.index, "name": self.name}


@dataclass(frozen=True)
class LoopPlan:
    """An exact tuple of unique steps."""

    steps: tuple[LoopStep, ...]

    def __post_init__(self) -> None:
        if len(set(self.steps)) != len(self.steps):
            raise PlanError("LoopPlan: steps must be unique")

    def __len__(self) -> int:
        return len(self.steps)

    def position(self, step: LoopStep) -> int:
        try:
            return self.steps.index(step)
        except ValueError:
            raise PlanError(f"LoopPlan: step {step} is not part of the plan") from None

    def after(self, step: LoopStep) -> int:
        """The cursor that follows ``step`` (its position + 1)."""
        return self.position(step) + 1

    def describe(self) -> list[dict[str, object]]:
        return [s.describe() for s in self.steps]


@dataclass
class LoopContext:
    """What extensions see at start: the plan, the model, the processors and the loop's shared state."""

    plan: LoopPlan
    model: Any
    processors: Sequence[Processor]
    state: Any


class LoopBoundary:
    """A completed step and the finalizer futures submitted so far that were not yet known to succeed."""

    def __init__(self, step: LoopStep, cursor: int, futures: Sequence[Future[Any]]) -> None:
        self.step = step
        self.cursor = cursor
        self._futures = list(futures)
        self._thread = threading.get_ident()
        self._open = True

    def close(self) -> None:
        self._open = False

    def quiesce(self) -> list[Any]:
        """Wait for every pending finalizer; return their results or raise the first failure (after all settle)."""
        if not self._open or threading.get_ident() != self._thread:
            raise RuntimeError("LoopBoundary.quiesce: the boundary is only valid during its callback on its thread")
        wait(self._futures)
        for fut in self._futures:
            if fut.cancelled():
                raise RuntimeError(f"a finalizer before boundary {self.step.name} was cancelled")
            error = fut.exception()
            if error is not None:
                raise error
        return [f.result() for f in self._futures]


class LoopExtension(Protocol):
    """What the loop calls; both methods are optional in practice (checked with ``hasattr``)."""

    def on_start(self, context: LoopContext) -> int | None: ...

    def on_boundary(self, boundary: LoopBoundary) -> None: ...


@dataclass
class LoopExtensions:
    """Dispatches start and boundary callbacks to every extension, in order."""

    extensions: Sequence[Any] = ()
    _pending: list[Future[Any]] = field(default_factory=list)

    def start(self, context: LoopContext) -> int:
        cursors = []
        for ext in self.extensions:
            fn = getattr(ext, "on_start", None)
            cursor = fn(context) if fn is not None else None
            if cursor is None:
                continue
            if isinstance(cursor, bool) or not isinstance(cursor, int) or not 0 <= cursor <= len(context.plan):
                raise PlanError(f"extension {type(ext).__name__}: cursor must be an int in [0, {len(context.plan)}]")
            cursors.append(cursor)
        if len(set(cursors)) > 1:
            raise PlanError(f"extensions returned conflicting start cursors {cursors}")
        return cursors[0] if cursors else 0

    def publish(self, step: LoopStep, cursor: int, futures: Iterable[Future[Any]] = ()) -> None:
        """Call every ``on_boundary``; keep futures that are unfinished, failed or cancelled for later."""
        self._pending.extend(futures)
        boundary = LoopBoundary(step, cursor, self._pending)
        try:
            for ext in self.extensions:
                fn = getattr(ext, "on_boundary", None)
                if fn is not None:
                    fn(boundary)
        finally:
            boundary.close()
        self._pending = [f for f in self._pending if not f.done() or f.cancelled() or f.exception() is not None]

    def pending(self) -> list[Future[Any]]:
        return list(self._pending)
