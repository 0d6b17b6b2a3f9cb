"""The Ray session's tests (``nox -s ray``): one local 2-worker Ray cluster for the whole session (fixture
``executor``), and the toy models and helpers of qlooper's own tests importable here and in the Ray worker
processes (they unpickle the toy layers), which inherit ``PYTHONPATH``."""

import os
import sys
from pathlib import Path

import pytest

TOYS = str(Path(__file__).resolve().parents[1] / "packages" / "qlooper" / "tests")
sys.path.insert(0, TOYS)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TOYS, os.environ.get("PYTHONPATH")) if p)


@pytest.fixture(scope="session")
def executor():
    """One RayExecutor (a local cluster, workers ``lowbit-worker-0`` and ``-1``) shared by every test; a test
    reads its own share of ``executor.times`` / ``executor.lost`` from the lengths before it ran."""
    from qlooper.ray_executor import RayExecutor

    with RayExecutor("local", workers=2) as ray_executor:
        assert [w["name"] for w in ray_executor.identities] == ["lowbit-worker-0", "lowbit-worker-1"]
        assert len({w["pid"] for w in ray_executor.identities} | {os.getpid()}) == 3  # two worker processes
        yield ray_executor
