"""Cooperative stop: SIGINT/SIGTERM become a request the caller honours at its next safe boundary.

``with cooperative_stop() as stop:`` installs handlers that only set ``stop.requested`` (and record which signal
arrived); on exit the previous handlers are restored exactly. Python only allows installing signal handlers
from the main thread, so the helper refuses to start elsewhere.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from .errors import CheckpointError

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)
_Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


class StopRequest:
    """A flag set by SIGINT/SIGTERM (or :meth:`request`); ``signal_name`` names the first signal received."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name: str | None = None

    @property
    def requested(self) -> bool:
        """True once a stop was requested."""
        return self._event.is_set()

    def request(self, reason: str = "requested") -> None:
        """Request a stop programmatically (``reason`` is kept in ``signal_name`` if none arrived yet)."""
        if self.signal_name is None:
            self.signal_name = reason
        self._event.set()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.request(signal.Signals(signum).name)


class CooperativeStopError(CheckpointError, RuntimeError):
    """The cooperative-stop helper was used where signal handlers cannot be installed (not the main thread)."""


@contextmanager
def cooperative_stop(signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> Iterator[StopRequest]:
    """Turn ``signals`` into a :class:`StopRequest` flag for the duration of the block; restore handlers after."""
    if threading.current_thread() is not threading.main_thread():
        raise CooperativeStopError(
            "cooperative_stop() must run on the main thread (Python installs signal handlers there)"
        )
    stop = StopRequest()
    previous: dict[signal.Signals, _Handler] = {}
    try:
        for signum in signals:
            previous[signum] = signal.getsignal(signum)
            signal.signal(signum, stop._on_signal)
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
