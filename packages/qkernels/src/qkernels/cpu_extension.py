"""Building and loading the AVX2 C++ kernel (``csrc/int4_avx2.cpp``) on first use.

The extension is compiled by ``torch.utils.cpp_extension.load`` into torch's extension cache, one folder
per Python/torch installation (about a minute on a small host, once; ``TORCH_EXTENSIONS_DIR`` moves it).
Probing never compiles: it checks the host ISA, the toolchain and whether an earlier build in this process
failed. Set ``QKERNELS_DISABLE_CPU_EXTENSION=1`` to turn the backend off.

torch's builder guards a build folder with a ``lock`` file that only the process holding it removes: a build
killed mid-way (Ctrl-C, a timeout) left it behind, and every later process waited on it forever, silently.
:func:`build_lock` therefore holds an ``flock`` on ``qkernels.flock`` in the folder around the build (the kernel
releases it when its process dies): while holding it no other live process is building there, so a leftover
``lock`` is removed (logged) before torch's builder runs.

``QKERNELS_EXTENSION_CACHE=DIR`` adds a build cache shared by every environment on the machine: the built
library is kept in ``DIR`` under a key of everything the build depends on (source bytes, compiler flags,
the compiler's identity, the Python ABI, the torch build), with a manifest recording those inputs and the
library's SHA-256. Another environment with the same key imports it instead of compiling. An entry whose
manifest is missing or unreadable, whose inputs differ from this environment's, whose library does not match
its recorded hash, or that fails to import is reported (a warning), removed and rebuilt; it is never used.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import torch

from .errors import QKernelsError

log = logging.getLogger(__name__)

SOURCE = Path(__file__).parent / "csrc" / "int4_avx2.cpp"
EXTENSION_NAME = "qkernels_int4_avx2_v6"
DISABLE_ENV = "QKERNELS_DISABLE_CPU_EXTENSION"
CACHE_ENV = "QKERNELS_EXTENSION_CACHE"
CFLAGS = ("-O3", "-mavx2", "-mfma", "-fopenmp")
LDFLAGS = ("-fopenmp",)
MANIFEST = "manifest.json"
LIBRARY = f"{EXTENSION_NAME}.so"

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
    try:
        cache = cache_root()
        _loaded = _build() if cache is None else load_cached(cache, build_key(), _build)
    except (RuntimeError, OSError, ImportError) as exc:
        _failure = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else type(exc).__name__
        raise ExtensionBuildError(f"building {SOURCE.name} failed: {exc}") from exc
    return _loaded


def _build() -> ModuleType:
    """Compile (or reuse this environment's up-to-date build of) the extension with torch's JIT builder."""
    from torch.utils.cpp_extension import load

    log.info("qkernels: building the AVX2 int4 extension (first use; cached afterwards)")
    directory = build_directory()
    directory.mkdir(parents=True, exist_ok=True)
    with build_lock(directory):
        module: ModuleType = load(
            build_directory=str(directory),
            name=EXTENSION_NAME,
            sources=[str(SOURCE)],
            extra_cflags=list(CFLAGS),
            extra_ldflags=list(LDFLAGS),
            verbose=False,
        )
    return module


BATON = "lock"
"""The file torch's JIT builder creates in the build folder while it builds (``torch.utils.file_baton``)."""
BUILD_LOCK = "qkernels.flock"


@contextmanager
def build_lock(directory: Path) -> Iterator[None]:
    """Hold ``directory``'s inter-process build lock (an ``flock``, released by the kernel when its process
    dies; blocks while another live process builds there), removing a ``lock`` file that torch's builder left
    from a build that did not finish (module docstring). Without ``fcntl`` (not POSIX) only torch's own file
    guards the build."""
    try:
        import fcntl
    except ImportError:  # not POSIX: torch's file baton alone
        yield
        return
    with open(directory / BUILD_LOCK, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            baton = directory / BATON
            if baton.exists():
                log.warning(
                    "qkernels: removing %s, left by an extension build that did not finish (no live process is "
                    "building in %s)",
                    baton,
                    directory,
                )
                baton.unlink(missing_ok=True)
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- the shared build cache (QKERNELS_EXTENSION_CACHE) ---


def cache_root() -> Path | None:
    """The shared build cache directory named by ``QKERNELS_EXTENSION_CACHE`` (None when unset or empty)."""
    value = os.environ.get(CACHE_ENV, "")
    return Path(value) if value else None


def _compiler_identity() -> dict[str, str]:
    """The C++ compiler torch's builder will run (``CXX`` or ``c++``): its path and ``--version`` banner."""
    compiler = os.environ.get("CXX") or "c++"
    path = shutil.which(compiler)
    if path is None:
        raise ExtensionBuildError(f"the C++ compiler {compiler!r} is not on PATH")
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ExtensionBuildError(f"{compiler} --version did not answer in {exc.timeout:.0f} s") from exc
    if done.returncode != 0 or not done.stdout.strip():
        raise ExtensionBuildError(f"{compiler} --version failed (rc {done.returncode}): {done.stderr.strip()[-300:]}")
    return {"cxx_path": os.path.realpath(path), "cxx_version": done.stdout.strip().splitlines()[0]}


def build_key() -> dict[str, str]:
    """Everything the built library depends on; equal keys mean interchangeable libraries."""
    return {
        "extension": EXTENSION_NAME,
        "source_sha256": hashlib.sha256(SOURCE.read_bytes()).hexdigest(),
        "cflags": " ".join(CFLAGS),
        "ldflags": " ".join(LDFLAGS),
        **_compiler_identity(),
        "python": sys.version,
        "ext_suffix": str(sysconfig.get_config_var("EXT_SUFFIX")),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "torch_git": str(torch.version.git_version),
        "torch_cxx11_abi": str(torch.compiled_with_cxx11_abi()),
    }


def entry_directory(cache: Path, key: dict[str, str]) -> Path:
    """The cache entry for ``key``: one folder per distinct key."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache / f"{EXTENSION_NAME}-{digest}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def entry_problem(entry: Path, key: dict[str, str]) -> str | None:
    """Why the cache entry ``entry`` must not be used for ``key`` (None when it is sound)."""
    manifest = entry / MANIFEST
    try:
        recorded = json.loads(manifest.read_text())
    except FileNotFoundError:
        return "its manifest is missing"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"its manifest is unreadable ({exc})"
    if not isinstance(recorded, dict) or not isinstance(recorded.get("key"), dict):
        return "its manifest has no build key"
    if recorded["key"] != key:
        changed = sorted(k for k in set(key) | set(recorded["key"]) if key.get(k) != recorded["key"].get(k))
        return f"it was built from other inputs (differs in {', '.join(changed)})"
    library = entry / LIBRARY
    if not library.is_file():
        return f"{LIBRARY} is missing"
    if _sha256(library) != recorded.get("sha256"):
        return f"{LIBRARY} does not match the SHA-256 its manifest records"
    return None


def _import_library(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(EXTENSION_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not an importable extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _discard(entry: Path, problem: str) -> None:
    log.warning("qkernels: ignoring the cached AVX2 extension in %s: %s; rebuilding", entry, problem)
    shutil.rmtree(entry, ignore_errors=True)  # if it cannot be removed, store() below fails and says so


def store(cache: Path, key: dict[str, str], library: Path) -> Path:
    """Put a freshly built ``library`` into the cache under ``key`` (atomically); returns the entry."""
    entry = entry_directory(cache, key)
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{entry.name}-", dir=cache))
    try:
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the entry from other users sharing the cache
        shutil.copyfile(library, staging / LIBRARY)
        manifest = {"key": key, "sha256": _sha256(staging / LIBRARY), "library": LIBRARY}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        try:
            staging.rename(entry)
        except OSError:
            if entry_problem(entry, key) is not None:  # not a sound entry another process just published
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return entry


def load_cached(cache: Path, key: dict[str, str], build: Callable[[], ModuleType]) -> ModuleType:
    """The extension from the cache entry for ``key``, or ``build()`` it and fill the entry.

    An entry that is not sound (see :func:`entry_problem`) or does not import is logged, removed and rebuilt.
    """
    entry = entry_directory(cache, key)
    if entry.exists():
        problem = entry_problem(entry, key)
        if problem is None:
            try:
                module = _import_library(entry / LIBRARY)
            except ImportError as exc:
                problem = f"it does not import ({exc})"
            else:
                log.info("qkernels: AVX2 extension loaded from the build cache %s", entry)
                return module
        _discard(entry, problem)
    module = build()
    built = Path(str(module.__file__))
    try:
        store(cache, key, built)
    except OSError as exc:  # the build itself succeeded: run with it, say why it is not cached
        log.warning("qkernels: could not cache the AVX2 extension in %s: %s", cache, exc)
    return module
