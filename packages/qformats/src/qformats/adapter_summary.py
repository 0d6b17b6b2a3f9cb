"""The LoRA adapter a checkpoint's quantization config names, summarized and checked for ``inspect``.

An EoRA checkpoint's config carries ``adapter: {"name": "lora", "path": "eora", "rank": R}`` (the reference's
field; lowbit writes the same): a directory inside the checkpoint holding ``adapter_model.safetensors``
(``base_model.model.<module>.lora_A.weight [R, in]`` and ``.lora_B.weight [out, R]``) and a PEFT
``adapter_config.json`` (``r``, ``target_modules``). vLLM's LoRA loader and GPT-QModel's kernels read it; an
engine that does not serves the base checkpoint without it. :func:`adapter_summary` reports what is there and
lists every way it falls short of what those loaders read (a missing or unreadable file, a rank that is not the
config's, a factor without its pair), each naming the file or tensor.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from .checkpoint.contained import inside_directory
from .checkpoint.safetensors_io import SafetensorsFile
from .errors import QFormatsError

WEIGHTS_FILE = "adapter_model.safetensors"
CONFIG_FILE = "adapter_config.json"
KEY_PREFIX = "base_model.model."
FACTORS = (".lora_A.weight", ".lora_B.weight")


def adapter_summary(
    root: Path, raw: Mapping[str, object], config_file: str
) -> tuple[dict[str, object] | None, list[str]]:
    """``(summary, problems)`` of the adapter that the quantization dict ``raw`` (read from ``config_file`` in
    the checkpoint directory ``root``) names; ``(None, [])`` when it names none.

    ``summary``: ``name``, ``path``, ``rank`` (the config's), ``modules`` (modules with both factors),
    ``target_modules`` (the PEFT config's), ``bytes`` (the factors' stored bytes). ``problems``: one line each,
    prefixed ``ADAPTER``."""
    spec = raw.get("adapter")
    if spec is None or spec == {}:
        return None, []
    where = f"{config_file}: field 'adapter'"
    if not isinstance(spec, Mapping):
        return None, [f"ADAPTER {where}: expected an object {{name, path, rank}}, found {type(spec).__name__}"]
    path, rank = spec.get("path"), spec.get("rank")
    summary: dict[str, object] = {"name": spec.get("name"), "path": path, "rank": rank}
    if not isinstance(path, str) or not path:
        return summary, [f"ADAPTER {where}: expected 'path', the adapter directory inside the checkpoint"]
    problems: list[str] = []
    if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
        problems.append(f"ADAPTER {where}: expected 'rank' a positive integer, found {rank!r}")
        rank = None
    try:
        weights = SafetensorsFile(inside_directory(root, f"{path}/{WEIGHTS_FILE}"))
    except (QFormatsError, OSError) as exc:
        return summary, [*problems, f"ADAPTER {path}/{WEIGHTS_FILE}: unreadable ({exc})"]
    problems.extend(_peft_config(root, path, rank, summary))
    modules: dict[str, dict[str, tuple[int, ...]]] = {}
    for name, info in weights.tensors.items():
        factor = next((f for f in FACTORS if name.endswith(f)), None)
        if not name.startswith(KEY_PREFIX) or factor is None:
            expected = f"{KEY_PREFIX}<module>.lora_A/B.weight"
            problems.append(f"ADAPTER {path}/{WEIGHTS_FILE}: tensor {name!r} is not {expected}")
            continue
        modules.setdefault(name[len(KEY_PREFIX) : -len(factor)], {})[factor] = info.shape
    for module, factors in sorted(modules.items()):
        problems.extend(_factor_problems(f"{path}/{WEIGHTS_FILE}", module, factors, rank))
    summary["modules"] = sum(len(f) == len(FACTORS) for f in modules.values())
    summary["bytes"] = sum(info.nbytes for info in weights.tensors.values())
    return summary, problems


def _peft_config(root: Path, path: str, rank: int | None, summary: dict[str, object]) -> list[str]:
    """Read the PEFT config into ``summary["target_modules"]``; its problems (missing, unreadable, another rank)."""
    name = f"{path}/{CONFIG_FILE}"
    try:
        config = json.loads(inside_directory(root, name).read_text(encoding="utf-8"))
    except (QFormatsError, OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return [f"ADAPTER {name}: unreadable ({exc})"]
    if not isinstance(config, dict):
        return [f"ADAPTER {name}: expected a JSON object, found {type(config).__name__}"]
    summary["target_modules"] = config.get("target_modules")
    if rank is not None and config.get("r") != rank:
        return [f"ADAPTER {name}: 'r' is {config.get('r')!r}, the quantization config's rank is {rank}"]
    return []


def _factor_problems(file: str, module: str, factors: Mapping[str, tuple[int, ...]], rank: int | None) -> list[str]:
    """A module's missing factor, or a factor whose rank dimension is not ``rank`` (``lora_A [rank, in]``,
    ``lora_B [out, rank]``)."""
    a, b = (factors.get(f) for f in FACTORS)
    if a is None or b is None:
        missing = FACTORS[0] if a is None else FACTORS[1]
        return [f"ADAPTER {file}: {KEY_PREFIX}{module}{missing} is missing (the module has one factor only)"]
    if len(a) != 2 or len(b) != 2 or a[0] != b[1] or (rank is not None and a[0] != rank):
        return [
            f"ADAPTER {file}: {module}: expected lora_A [{rank or 'r'}, in] and lora_B [out, {rank or 'r'}], "
            f"found {list(a)} and {list(b)}"
        ]
    return []
