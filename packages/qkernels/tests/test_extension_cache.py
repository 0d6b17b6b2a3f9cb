"""The shared build cache of the AVX2 extension (QKERNELS_EXTENSION_CACHE): a sound entry is imported instead of
compiling; a stale, corrupt or incomplete entry is reported, removed and rebuilt, never used.

The library under test is the one this session already built (or took from the CI cache): each test copies it
into its own cache folder, so nothing here compiles. In one process an extension module is initialised once (a
second import of another copy hands back the same module object, with the new spec), so the in-process tests
tell a cache import by ``__spec__.origin``; the subprocess test shows a fresh process running the cached copy.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from qkernels import cpu_extension
from qkernels.cpu_extension import (
    CACHE_ENV,
    LIBRARY,
    MANIFEST,
    build_key,
    entry_directory,
    entry_problem,
    extension_reasons,
    load_cached,
    load_extension,
    store,
)

NO_CPU_EXTENSION = extension_reasons()
if NO_CPU_EXTENSION and os.environ.get("LOWBIT_REQUIRE_CPU_EXTENSION"):
    raise RuntimeError(f"LOWBIT_REQUIRE_CPU_EXTENSION is set but cpu_int4 cannot build: {NO_CPU_EXTENSION}")
pytestmark = pytest.mark.skipif(bool(NO_CPU_EXTENSION), reason=f"cpu_int4 unavailable: {NO_CPU_EXTENSION}")

FUNCTIONS = ("int4_kn8_gemv", "int4_kn8_fused_mm", "int4_kn8_dequant_mm", "fused_isa")


@pytest.fixture(scope="module")
def built() -> ModuleType:
    """The extension as this process loaded it (built once per session, or read from the session's cache)."""
    return load_extension()


@pytest.fixture(scope="module")
def library(built: ModuleType) -> Path:
    return Path(str(built.__file__))


def _origin(module: ModuleType) -> Path:
    """The file the import that produced ``module`` was asked to load."""
    assert module.__spec__ is not None and module.__spec__.origin is not None
    return Path(module.__spec__.origin)


class Builds:
    """A stand-in for the compiler that hands back the already-built extension and counts its calls."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.calls = 0

    def __call__(self) -> ModuleType:
        self.calls += 1
        return self.module


def test_a_stored_entry_is_imported_without_building(tmp_path: Path, library: Path, built: ModuleType) -> None:
    key = build_key()
    entry = store(tmp_path, key, library)
    assert entry == entry_directory(tmp_path, key)
    manifest = json.loads((entry / MANIFEST).read_text())
    assert manifest["key"] == key
    assert (entry / LIBRARY).read_bytes() == library.read_bytes()
    assert entry_problem(entry, key) is None

    builds = Builds(built)
    module = load_cached(tmp_path, key, builds)
    assert builds.calls == 0
    assert _origin(module) == entry / LIBRARY
    assert all(callable(getattr(module, name)) for name in FUNCTIONS)
    assert [p.name for p in tmp_path.iterdir()] == [entry.name]  # no staging folder left behind


def test_an_empty_cache_builds_once_then_serves_the_entry(tmp_path: Path, built: ModuleType) -> None:
    key = build_key()
    builds = Builds(built)
    assert load_cached(tmp_path / "cache", key, builds) is built
    assert builds.calls == 1
    entry = entry_directory(tmp_path / "cache", key)
    assert entry_problem(entry, key) is None
    again = load_cached(tmp_path / "cache", key, builds)
    assert builds.calls == 1 and _origin(again) == entry / LIBRARY


def _flip_a_byte(entry: Path) -> None:
    data = bytearray((entry / LIBRARY).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (entry / LIBRARY).write_bytes(bytes(data))


def _truncate(entry: Path) -> None:
    data = (entry / LIBRARY).read_bytes()
    (entry / LIBRARY).write_bytes(data[: len(data) // 3])


def _other_torch(entry: Path) -> None:
    manifest = json.loads((entry / MANIFEST).read_text())
    manifest["key"]["torch"] = "0.0.0"
    (entry / MANIFEST).write_text(json.dumps(manifest))


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "flipped byte": (_flip_a_byte, "does not match the SHA-256 its manifest records"),
    "truncated library": (_truncate, "does not match the SHA-256 its manifest records"),
    "library deleted": (lambda e: (e / LIBRARY).unlink(), f"{LIBRARY} is missing"),
    "manifest deleted": (lambda e: (e / MANIFEST).unlink(), "its manifest is missing"),
    "manifest not JSON": (lambda e: (e / MANIFEST).write_text("{not json"), "its manifest is unreadable"),
    "manifest without key": (lambda e: (e / MANIFEST).write_text("{}"), "its manifest has no build key"),
    "built by another torch": (_other_torch, "it was built from other inputs (differs in torch)"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_an_unsound_entry_is_reported_removed_and_rebuilt(
    damage: str, tmp_path: Path, library: Path, built: ModuleType, caplog: pytest.LogCaptureFixture
) -> None:
    key = build_key()
    entry = store(tmp_path, key, library)
    harm, reason = DAMAGE[damage]
    harm(entry)
    problem = entry_problem(entry, key)
    assert problem is not None and reason in problem

    builds = Builds(built)
    with caplog.at_level(logging.WARNING, logger="qkernels.cpu_extension"):
        module = load_cached(tmp_path, key, builds)
    assert module is built and builds.calls == 1  # the damaged library was not imported
    assert any(str(entry) in r.getMessage() and reason in r.getMessage() for r in caplog.records), caplog.text
    assert entry_problem(entry, key) is None  # the rebuilt library replaced it
    assert (entry / LIBRARY).read_bytes() == library.read_bytes()


def test_the_key_follows_the_source_and_the_compiler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = build_key()
    edited = tmp_path / cpu_extension.SOURCE.name
    edited.write_bytes(cpu_extension.SOURCE.read_bytes() + b"\n// edited\n")
    with monkeypatch.context() as patch:
        patch.setattr(cpu_extension, "SOURCE", edited)
        changed = build_key()
    assert changed["source_sha256"] != key["source_sha256"]
    assert entry_directory(tmp_path, changed) != entry_directory(tmp_path, key)

    other = tmp_path / "other-c++"  # another compiler binary, with its own version banner
    other.write_text("#!/bin/sh\necho 'other-c++ (Example) 99.1'\n")
    other.chmod(0o755)
    monkeypatch.setenv("CXX", str(other))
    changed = build_key()
    assert changed["cxx_version"] == "other-c++ (Example) 99.1" and changed["cxx_path"] == str(other)
    assert entry_directory(tmp_path, changed) != entry_directory(tmp_path, key)
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with pytest.raises(cpu_extension.ExtensionBuildError, match="is not on PATH"):
        build_key()


def test_load_extension_uses_the_cache_named_by_the_environment(
    tmp_path: Path, built: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "shared"))
    builds = Builds(built)
    monkeypatch.setattr(cpu_extension, "_build", builds)
    monkeypatch.setattr(cpu_extension, "_loaded", None)
    assert load_extension() is built and builds.calls == 1
    entry = entry_directory(tmp_path / "shared", build_key())
    assert entry_problem(entry, build_key()) is None

    monkeypatch.setattr(cpu_extension, "_loaded", None)  # another process on the same machine
    module = load_extension()
    assert builds.calls == 1 and _origin(module) == entry / LIBRARY


FRESH_PROCESS = """
import torch
from qkernels import quant_linear_from_weight
from qkernels.testing.cases import LayerCase, float_reference, make_activations, make_weight
case = LayerCase("gptq", 4, 32, False, 32, 128)
weight = make_weight(case)
module = quant_linear_from_weight(weight, "gptq", backend="cpu_int4")
x = make_activations(case, 3, torch.float32)
print(module._ext.__file__)
print(torch.allclose(module(x), float_reference(x, weight, None).float(), atol=1e-4))
"""


def test_a_fresh_process_runs_the_cached_library_without_compiling(tmp_path: Path, library: Path) -> None:
    # A fresh interpreter is the point: one that has never loaded the extension, as a second nox session is.
    entry = store(tmp_path / "cache", build_key(), library)
    torch_builds = tmp_path / "torch-extensions"  # where a compile would go
    env = {**os.environ, CACHE_ENV: str(tmp_path / "cache"), "TORCH_EXTENSIONS_DIR": str(torch_builds)}
    done = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(entry / LIBRARY), "True"]
    assert not torch_builds.exists()
