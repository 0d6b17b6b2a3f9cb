"""SIGKILL at random moments of a busy writer: the next load always returns a complete, byte-identical generation.

The writer commits generation after generation; the parent kills it after a random delay. The generation that
loads must be the last one the writer reported committed, or the one after it (killed after CURRENT was replaced
but before the report was printed), and its bytes must be exactly what was committed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import CHILD, HANG_GUARD_S, assert_generation, run_child
from qcheckpoint import CheckpointStore

TRIALS = 8


def test_random_kill_timing(tmp_path: Path) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    root = tmp_path / "ckpt"
    code, committed = run_child(root, 1, 1)
    assert code == 0 and committed == [1]
    env = {k: v for k, v in os.environ.items() if k != "QCHECKPOINT_FAULT"}
    last = 1
    for trial in range(TRIALS):
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), str(root), str(last + 1), str(last + 400), "--collect"],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "READY", f"seed {seed} trial {trial}: writer did not start"
        time.sleep(rng.uniform(0.0, 0.25))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=HANG_GUARD_S)
        reported = [int(line.split()[1]) for line in out.splitlines() if line.startswith("COMMITTED")]
        floor = reported[-1] if reported else last
        with CheckpointStore(root) as store:
            loaded = store.load({"model": "crash-test", "plan": [1, 2, 3], "bits": 4})
        assert loaded is not None
        assert loaded.cursor in (floor, floor + 1), f"seed {seed} trial {trial}: loaded {loaded.cursor}, floor {floor}"
        assert_generation(root, loaded.cursor)
        last = loaded.cursor
