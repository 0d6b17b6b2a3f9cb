"""A checkpoint writer run as a subprocess by the crash tests (not a test module).

``python crash_child.py ROOT FIRST LAST [--collect]`` loads ROOT (identity :data:`IDENTITY`), checks that the
loaded cursor is FIRST - 1 (or that the store is fresh when FIRST is 1), then commits generations FIRST..LAST
with deterministic content, printing ``COMMITTED <k>`` (flushed) after each commit returns. ``QCHECKPOINT_FAULT``
in the environment makes the store kill this process at a named point.
"""

from __future__ import annotations

import sys

import numpy as np
from qcheckpoint import CheckpointStore, encode_continuation

IDENTITY = {"model": "crash-test", "plan": [1, 2, 3], "bits": 4}


def artifact_bytes(step: int, size: int = 64 * 1024) -> bytes:
    """The artifact produced by step ``step`` (deterministic)."""
    return np.random.default_rng(1000 + step).integers(0, 256, size, dtype=np.uint8).tobytes()


def continuation_tree(cursor: int) -> dict[str, object]:
    """The continuation committed at ``cursor`` (deterministic)."""
    rng = np.random.default_rng(cursor)
    return {"cursor": cursor, "cache": [rng.standard_normal((16, 8)).astype(np.float32)], "log": ["step"] * cursor}


def expected_artifacts(cursor: int) -> dict[str, bytes]:
    """Every artifact a generation at ``cursor`` must list."""
    return {f"layer.{step}": artifact_bytes(step) for step in range(cursor)}


def main(argv: list[str]) -> int:
    root, first, last = argv[0], int(argv[1]), int(argv[2])
    with CheckpointStore(root, keep_last=2) as store:
        loaded = store.load(IDENTITY)
        found = 0 if loaded is None else loaded.cursor
        if found != first - 1:
            print(f"UNEXPECTED cursor {found}, wanted {first - 1}", flush=True)
            return 3
        artifacts = {} if loaded is None else dict(loaded.artifacts)
        print("READY", flush=True)
        for cursor in range(first, last + 1):
            artifacts[f"layer.{cursor - 1}"] = store.put(artifact_bytes(cursor - 1))
            continuation = store.put(encode_continuation(continuation_tree(cursor)))
            store.commit(IDENTITY, cursor, continuation, artifacts)
            print(f"COMMITTED {cursor}", flush=True)
            if "--collect" in argv:
                store.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
