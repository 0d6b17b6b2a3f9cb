"""EoRA adapters on disk and in the forward, in the layout GPT-QModel 7.7.0 writes and reads.

On disk (the reference's ``_eora_save`` / ``Lora.post_init``): a directory, ``eora/`` inside the checkpoint
by default, named by the quantization config's ``adapter: {"name": "lora", "path": "eora", "rank": R}``,
holding ``adapter_model.safetensors`` and a PEFT ``adapter_config.json`` (``peft_type`` LORA, ``r`` =
``lora_alpha`` = R, ``target_modules``: the modules' last name parts). Tensor names are
``base_model.model.<module>.lora_A.weight`` ``[R, in]`` and ``.lora_B.weight`` ``[out, R]`` in the model's
dtype. In the forward a module computes ``base(x) + (x @ lora_A.weightᵀ) @ lora_B.weightᵀ`` (the reference's
``out + (x @ A) @ B`` with its transposed copies), in the input's dtype.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import torch
from qformats.adapter_summary import CONFIG_FILE, KEY_PREFIX, WEIGHTS_FILE
from torch import nn

from .errors import SourceFormatError


class LoraLinear(nn.Module):
    """A (quantized) linear ``base`` plus a low-rank term: ``lora_a`` ``[r, in]``, ``lora_b`` ``[out, r]``."""

    lora_a: torch.Tensor  # registered buffers, typed here for mypy
    lora_b: torch.Tensor

    def __init__(self, base: nn.Module, lora_a: torch.Tensor, lora_b: torch.Tensor) -> None:
        super().__init__()
        self.base = base
        self.register_buffer("lora_a", lora_a.detach().clone())
        self.register_buffer("lora_b", lora_b.detach().clone())
        self.in_features = int(lora_a.shape[1])
        self.out_features = int(lora_b.shape[0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = (x @ self.lora_a.to(x.dtype).T) @ self.lora_b.to(x.dtype).T
        base: torch.Tensor = self.base(x)  # a module call (untyped in torch)
        return base + low


def round_adapters(model: nn.Module, dtype: torch.dtype) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Round every :class:`LoraLinear`'s factors to ``dtype`` in place (the model then computes what a reload
    of the saved files computes); returns module name -> (``lora_A.weight``, ``lora_B.weight``) in ``dtype``."""
    out: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLinear):
            a, b = module.lora_a.to(dtype), module.lora_b.to(dtype)
            module.lora_a, module.lora_b = a.to(module.lora_a.dtype), b.to(module.lora_b.dtype)
            out[name] = (a, b)
    return out


def write_adapter(
    directory: Path, adapters: dict[str, tuple[torch.Tensor, torch.Tensor]], rank: int, base: str
) -> Path:
    """Write ``adapter_model.safetensors`` (PEFT names, the tensors' own dtype) and ``adapter_config.json``
    into ``directory`` (created); ``adapters``: module name -> (``lora_A.weight``, ``lora_B.weight``)."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name in sorted(adapters):
        a, b = adapters[name]
        tensors[f"{KEY_PREFIX}{name.lower()}.lora_A.weight"] = a.contiguous()
        tensors[f"{KEY_PREFIX}{name.lower()}.lora_B.weight"] = b.contiguous()
    weights = directory / WEIGHTS_FILE
    save_file(tensors, str(weights), metadata={"format": "pt"})
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": rank,
        "target_modules": sorted({name.rsplit(".", 1)[-1] for name in adapters}),
        "base_model_name_or_path": base,
    }
    config_file = directory / CONFIG_FILE
    config_file.write_text(json.dumps(config, indent=2))
    # safetensors (0.8) creates its file 0600, which hides the adapter from an engine running as another
    # user; give it the mode the user's umask gives any new file (the JSON written just above).
    weights.chmod(stat.S_IMODE(config_file.stat().st_mode))
    return directory


def read_adapter(directory: Path, rank: int, root: Path | None = None) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Module name -> (``lora_A.weight`` ``[r, in]``, ``lora_B.weight`` ``[out, r]``) from ``directory``;
    raises :class:`SourceFormatError` naming the file and the tensor that is missing or malformed. With
    ``root`` (the checkpoint directory), each file must resolve inside it and be a regular file."""
    from safetensors.torch import load_file

    from .source.json_files import checked_file

    weights, config_file = directory / WEIGHTS_FILE, directory / CONFIG_FILE
    for path in (weights, config_file):
        if root is not None and os.path.lexists(path):
            checked_file(root, os.path.relpath(path, root))
        if not path.is_file():
            raise SourceFormatError(f"{path}: missing (the checkpoint's adapter names {directory.name!r})")
    config = json.loads(config_file.read_text())
    if config.get("r") != rank:
        raise SourceFormatError(f"{config_file}: r is {config.get('r')!r}, the quantization config says {rank}")
    tensors = load_file(str(weights))
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        for part in ("lora_A", "lora_B"):
            suffix = f".{part}.weight"
            if key.startswith(KEY_PREFIX) and key.endswith(suffix):
                pairs.setdefault(key[len(KEY_PREFIX) : -len(suffix)], {})[part] = value
                break
        else:
            raise SourceFormatError(
                f"{weights}: unexpected tensor {key!r} (expected {KEY_PREFIX}<module>.lora_A/B.weight)"
            )
    out = {}
    for name, pair in pairs.items():
        if set(pair) != {"lora_A", "lora_B"}:
            raise SourceFormatError(f"{weights}: module {name!r} has {sorted(pair)}, expected lora_A and lora_B")
        a, b = pair["lora_A"], pair["lora_B"]
        if a.ndim != 2 or b.ndim != 2 or a.shape[0] != b.shape[1]:
            raise SourceFormatError(
                f"{weights}: module {name!r}: lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)} "
                "are not [r, in], [out, r]"
            )
        out[name] = (a, b)
    return out


def wrap_modules(model: nn.Module, adapters: dict[str, tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Replace each named module by a :class:`LoraLinear` around it (names as the model spells them)."""
    modules = {name.lower(): name for name, _ in model.named_modules()}
    for key, (a, b) in adapters.items():
        name = modules.get(key)
        if name is None:
            raise SourceFormatError(f"adapter module {key!r}: not in the model")
        base = model.get_submodule(name)
        out_features = getattr(base, "out_features", None)
        in_features = getattr(base, "in_features", None)
        if (in_features, out_features) != (a.shape[1], b.shape[0]):
            raise SourceFormatError(
                f"adapter module {name!r}: lora shapes [{a.shape[1]} -> {b.shape[0]}] do not match the module's "
                f"[{in_features} -> {out_features}]"
            )
        parent, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, leaf, LoraLinear(base, a, b))
