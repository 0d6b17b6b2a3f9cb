"""The Ray session's tests (``nox -s ray``): the toy models and helpers of qlooper's own tests are importable,
here and in the Ray worker processes (they unpickle the toy layers), which inherit ``PYTHONPATH``."""

import os
import sys
from pathlib import Path

TOYS = str(Path(__file__).resolve().parents[1] / "packages" / "qlooper" / "tests")
sys.path.insert(0, TOYS)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (TOYS, os.environ.get("PYTHONPATH")) if p)
