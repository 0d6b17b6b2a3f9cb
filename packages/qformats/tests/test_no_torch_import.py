"""qformats stays numpy-only: importing it (and every submodule) must not import torch."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import importlib, pkgutil, sys
import qformats
for info in pkgutil.walk_packages(qformats.__path__, "qformats."):
    if info.name.split(".")[-1] in {"torch_adapter"}:
        continue
    importlib.import_module(info.name)
heavy = sorted(m for m in ("torch", "transformers", "triton", "safetensors") if m in sys.modules)
print(",".join(heavy))
"""


def test_importing_qformats_does_not_import_torch() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True, timeout=600)
    assert out.stdout.strip() == ""
