"""The writer lease: a second writer is refused at once naming the owner; a dead writer's lock never blocks."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import HANG_GUARD_S
from qcheckpoint import CheckpointLeaseError, CheckpointStore

# Holds the lease until killed (or its stdin closes), however long the parent takes to get there.
HOLDER = """
import sys
from qcheckpoint import CheckpointStore
with CheckpointStore(sys.argv[1]) as store:
    print("HELD", flush=True)
    sys.stdin.read()
"""


def start_holder(root: Path) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "HELD"
    return proc


def test_second_writer_is_refused_with_owner_identity_then_dead_owner_releases(root: Path) -> None:
    proc = start_holder(root)
    try:
        with pytest.raises(CheckpointLeaseError, match=f"pid {proc.pid} on host {socket.gethostname()}"):
            with CheckpointStore(root):
                pass
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=HANG_GUARD_S)
    assert (root / "writer.lock").exists()  # the stale lock file is still there ...
    with CheckpointStore(root) as store:  # ... and does not block a new run
        assert store.load({"a": 1}) is None
    assert f'"pid": {os.getpid()}' in (root / "writer.owner").read_text()


def test_second_store_in_the_same_process_is_refused(root: Path) -> None:
    with CheckpointStore(root):
        with pytest.raises(CheckpointLeaseError, match="another writer"):
            with CheckpointStore(root):
                pass
    with CheckpointStore(root):  # released on exit
        pass


def test_operations_must_run_on_the_lease_thread(root: Path) -> None:
    errors: list[BaseException] = []
    with CheckpointStore(root) as store:

        def worker() -> None:
            try:
                store.put(b"x")
            except CheckpointLeaseError as exc:
                errors.append(exc)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    assert len(errors) == 1 and "thread" in str(errors[0])


def test_entering_twice_is_refused(root: Path) -> None:
    store = CheckpointStore(root)
    with store, pytest.raises(CheckpointLeaseError, match="already holds"):
        store.__enter__()
