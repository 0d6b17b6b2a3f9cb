"""Shared helpers for the qcheckpoint tests: the crash-writer subprocess and generation checks."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from qcheckpoint import CheckpointStore

CHILD = Path(__file__).with_name("crash_child.py")
HANG_GUARD_S = 600  # subprocess timeouts only catch hangs; a loaded machine must never reach them


def _load_child() -> ModuleType:
    spec = importlib.util.spec_from_file_location("qcheckpoint_crash_child", CHILD)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


child = _load_child()


def run_child(
    root: Path, first: int, last: int, fault: str | None = None, collect: bool = False
) -> tuple[int, list[int]]:
    """Run the writer subprocess to completion (or its injected death); returns (returncode, committed cursors)."""
    env = {k: v for k, v in os.environ.items() if k != "QCHECKPOINT_FAULT"}
    if fault:
        env["QCHECKPOINT_FAULT"] = fault
    args = [sys.executable, str(CHILD), str(root), str(first), str(last)] + (["--collect"] if collect else [])
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
    committed = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("COMMITTED")]
    if "UNEXPECTED" in proc.stdout or (proc.returncode not in (0, -9)):
        raise AssertionError(f"writer failed rc={proc.returncode}\nstdout={proc.stdout}\nstderr={proc.stderr}")
    return proc.returncode, committed


def assert_generation(root: Path, cursor: int) -> None:
    """The store at ``root`` loads generation ``cursor`` with byte-identical continuation and artifacts."""
    with CheckpointStore(root) as store:
        loaded = store.load(child.IDENTITY)
        assert loaded is not None, "expected a published generation, found a fresh store"
        assert loaded.cursor == cursor
        assert loaded.skipped == ()
        expected = child.expected_artifacts(cursor)
        assert sorted(loaded.artifacts) == sorted(expected)
        for name, data in expected.items():
            assert loaded.artifact_path(name).read_bytes() == data
        tree = loaded.decode_continuation()
        want = child.continuation_tree(cursor)
        assert tree["cursor"] == want["cursor"] and tree["log"] == want["log"]
        assert tree["cache"][0].dtype == want["cache"][0].dtype
        assert tree["cache"][0].tobytes() == want["cache"][0].tobytes()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A fresh, not yet created store root."""
    return tmp_path / "ckpt"


def arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Same dtype, shape and bytes."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
