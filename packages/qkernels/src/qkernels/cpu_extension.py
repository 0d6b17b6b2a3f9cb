"""Building and loading the AVX2 C++ kernel (``csrc/int4_avx2.cpp``) on first use.

The extension is compiled by ``torch.utils.cpp_extension.load`` into torch's extension cache, one folder
per Python/torch installation (about a minute on a small host, once; ``TORCH_EXTENSIONS_DIR`` moves it).
Probing never compiles: it checks the host ISA, the toolchain and whether an earlier build in this process
failed. Set ``QKERNELS_DISABLE_CPU_EXTENSION=1`` to turn the backend off.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import sys
import threading
from pathlib import Path
from types import ModuleType

import torch

from .errors import QKernelsError

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "csrc" / "int4_avx2.cpp"
EXTENSION_NAME = "qkernels_int4_avx2_v5"
DISABLE_ENV = "QKERNELS_DISABLE_CPU_EXTENSION"

_loaded: ModuleType | None = None
_failure: str | None = None
_lock = threading.Lock()


class ExtensionBuildError(QKernelsError, RuntimeError):
    """The C++ extension could not be compiled or loaded (the message carries the compiler's tail)."""


def extension_reasons() -> list[str]:
    """Why the AVX2 extension cannot be used here (empty when it is loaded or can be built)."""
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        return [f"disabled by {DISABLE_ENV}"]
    if _failure is not None:
        return [f"the C++ extension failed to build in this process: {_failure}"]
    if _loaded is not None:
        return []
    isa = torch.backends.cpu.get_cpu_capability()
    if isa not in ("AVX2", "AVX512"):
        return [f"host CPU capability {isa} lacks AVX2/FMA"]
    missing = [tool for tool in ("c++", "ninja") if shutil.which(tool) is None]
    if missing:
        return [f"building the C++ extension needs {' and '.join(missing)} on PATH"]
    return []


def build_directory() -> Path:
    """Where this environment builds the extension: torch's extension root, one folder per Python/torch
    installation (two virtual environments sharing one folder would rebuild on every alternation)."""
    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    key = f"{sys.executable}|{torch.__file__}|{torch.__version__}".encode()
    return root / f"{EXTENSION_NAME}-{hashlib.sha1(key).hexdigest()[:12]}"


def load_extension() -> ModuleType:
    """The compiled extension module, building it on first call (raises ExtensionBuildError)."""
    with _lock:
        return _load_locked()


def _load_locked() -> ModuleType:
    global _loaded, _failure
    if _loaded is not None:
        return _loaded
    reasons = extension_reasons()
    if reasons:
        raise ExtensionBuildError("; ".join(reasons))
    from torch.utils.cpp_extension import load

    log.info("qkernels: building the AVX2 int4 extension (first use; cached afterwards)")
    try:
        directory = build_directory()
        directory.mkdir(parents=True, exist_ok=True)
        _loaded = load(
            build_directory=str(directory),
            name=EXTENSION_NAME,
            sources=[str(SOURCE)],
            extra_cflags=["-O3", "-mavx2", "-mfma", "-fopenmp"],
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except (RuntimeError, OSError, ImportError) as exc:
        _failure = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__
        raise ExtensionBuildError(f"building {SOURCE.name} failed: {exc}") from exc
    return _loaded
