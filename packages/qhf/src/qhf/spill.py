"""The spill area of a streaming quantization (``QuantModel.quantize(keep_in_memory=False)``).

As each decoder layer finishes, its quantized modules are written with qlooper's
:meth:`~qlooper.finalize.FinalizedModule.spill` to ``<root>/modules/<module>/module.safetensors`` (layout
tensors in pack order, bias, logical weight) and its other tensors (norms, biases, AWQ-rescaled weights: every
source tensor of the layer that is not a quantized weight), in the compute dtype, to
``<root>/dense/<layer prefix>.safetensors``; the layer then goes back to the meta device. Only the names,
shapes and dtypes stay in memory. ``save`` and verify-after-save read the files back one tensor at a time.
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file


@dataclass(frozen=True)
class SpilledTensor:
    """Where a spilled dense tensor lives and its ``shape`` / ``dtype`` (the compute dtype it was held in)."""

    path: Path
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass
class SpillArea:
    """A directory of spilled layers (module docstring). ``root`` is removed when the area is garbage collected
    or the interpreter exits (:meth:`create`); ``dense_index``: tensor name -> :class:`SpilledTensor`."""

    root: Path
    dense_index: dict[str, SpilledTensor] = field(default_factory=dict)

    @classmethod
    def create(cls, parent: str | Path | None = None) -> SpillArea:
        """A fresh ``qhf-spill-*`` directory under ``parent`` (created; None: the system temp directory)."""
        if parent is not None:
            Path(parent).mkdir(parents=True, exist_ok=True)
        root = Path(tempfile.mkdtemp(prefix="qhf-spill-", dir=parent))
        area = cls(root)
        weakref.finalize(area, shutil.rmtree, root, ignore_errors=True)
        return area

    @property
    def modules_root(self) -> Path:
        """Where ``FinalizedModule.spill`` writes the quantized modules."""
        return self.root / "modules"

    def write_dense(self, prefix: str, tensors: dict[str, torch.Tensor]) -> None:
        """Write ``tensors`` (full names under layer ``prefix``) to ``dense/<prefix>.safetensors``."""
        if not tensors:
            return
        path = self.root / "dense" / f"{prefix}.safetensors"
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}, str(path))
        for name, value in tensors.items():
            self.dense_index[name] = SpilledTensor(path, tuple(int(d) for d in value.shape), value.dtype)

    def dense(self, name: str) -> torch.Tensor | None:
        """The spilled tensor ``name`` read from its file (None when it was not spilled)."""
        entry = self.dense_index.get(name)
        if entry is None:
            return None
        with safe_open(str(entry.path), framework="pt") as handle:
            tensor: torch.Tensor = handle.get_tensor(name)  # safetensors is untyped
        return tensor
