"""The exclusive writer lease of a store root: ``writer.lock`` (filelock, timeout 0) plus ``writer.owner``.

The lock is an OS file lock, so the kernel releases it when the holder dies: a dead writer's stale
``writer.lock`` never blocks a new run. ``writer.owner`` records who holds the lease (pid, host, start time) so
that a refused writer can say whom it lost to; it is informational only and rewritten by each new holder.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from filelock import FileLock, Timeout

from .durable_io import atomic_replace_file
from .errors import CheckpointLeaseError
from .faults import NO_FAULTS

LOCK_NAME = "writer.lock"
OWNER_NAME = "writer.owner"


def _describe_owner(root: Path) -> str:
    try:
        owner = json.loads((root / OWNER_NAME).read_text(encoding="utf-8"))
        return f"pid {owner['pid']} on host {owner['host']} (since {owner['started']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "an unknown process (writer.owner is missing or unreadable)"


class WriterLease:
    """Exclusive, non-blocking writer lease over ``root``; remembers the thread that took it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._lock = FileLock(str(root / LOCK_NAME), timeout=0, thread_local=False)
        self._thread: int | None = None

    @property
    def held(self) -> bool:
        """True while this object holds the lease."""
        return self._thread is not None

    def acquire(self) -> None:
        """Take the lease now or raise :class:`CheckpointLeaseError` naming the current owner."""
        if self._thread is not None:
            raise CheckpointLeaseError(f"{self.root}: this store already holds the writer lease")
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise CheckpointLeaseError(
                f"{self.root}: another writer holds the checkpoint lease ({LOCK_NAME}): {_describe_owner(self.root)}; "
                "stop that run before starting another on the same root"
            ) from None
        self._thread = threading.get_ident()
        owner = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        try:
            atomic_replace_file(self.root, OWNER_NAME, json.dumps(owner).encode(), NO_FAULTS)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Give the lease back (idempotent)."""
        if self._thread is None:
            return
        self._thread = None
        self._lock.release(force=True)

    def check(self, operation: str) -> None:
        """Raise unless the lease is held and ``operation`` runs on the thread that took it."""
        if self._thread is None:
            raise CheckpointLeaseError(
                f"{self.root}: {operation} needs the writer lease; use the store as a context manager (with store: ...)"
            )
        if self._thread != threading.get_ident():
            raise CheckpointLeaseError(f"{self.root}: {operation} must run on the thread that took the writer lease")
