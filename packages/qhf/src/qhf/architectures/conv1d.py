"""transformers' ``Conv1D`` (GPT-2, GPT-SW3, OpenAI GPT) as an ``nn.Linear`` of the skeleton.

``Conv1D(nf, nx)`` computes ``x @ weight + bias`` with ``weight`` stored ``[in, out]`` (``[nx, nf]``): an
``nn.Linear`` whose weight is the transpose. The skeleton replaces each one with a :class:`Conv1DLinear`
(``in_features = nx``, ``out_features = nf``, weight ``[out, in]``), so discovery, calibration hooks, GPTQ /
AWQ and the packed layouts see an ordinary linear: a quantized Conv1D is saved in the same GPTQ / AWQ layouts as
an ``nn.Linear`` of those widths (``qweight [in / 8, out]`` ...), as GPT-QModel writes GPT-2. Its dense weight
keeps the files' layout: it is transposed where it is read from a source or checkpoint file
(:func:`conv1d_weights` names those tensors) and transposed back where a dense one is written.
"""

from __future__ import annotations

import torch
from torch import nn


class Conv1DLinear(nn.Linear):
    """The ``nn.Linear`` standing in for a transformers ``Conv1D`` (weight ``[out, in]``, the transpose of the
    files' ``[in, out]``); the forward is ``nn.Linear``'s."""


def linearize_conv1d(model: nn.Module) -> list[str]:
    """Replace every transformers ``Conv1D`` module of ``model`` with a :class:`Conv1DLinear` on the meta device
    (same dtype, a bias when it has one); returns the dotted names replaced."""
    try:
        from transformers.pytorch_utils import Conv1D
    except ImportError:  # a transformers without Conv1D has no such module to replace
        return []
    replaced = []
    for name, module in list(model.named_modules()):
        if not isinstance(module, Conv1D):
            continue
        n_in, n_out = (int(d) for d in module.weight.shape)
        with torch.device("meta"):
            linear = Conv1DLinear(n_in, n_out, bias=module.bias is not None, dtype=module.weight.dtype)
        parent_name, _, leaf = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, leaf, linear)
        replaced.append(name)
    return replaced


def conv1d_weights(model: nn.Module) -> frozenset[str]:
    """Dotted names of the ``weight`` tensors of ``model``'s :class:`Conv1DLinear` modules (stored ``[in, out]``
    in files, ``[out, in]`` in the skeleton)."""
    return frozenset(f"{name}.weight" for name, module in model.named_modules() if isinstance(module, Conv1DLinear))


def skeleton_layout(name: str, tensor: torch.Tensor, transposed: frozenset[str]) -> torch.Tensor:
    """File tensor ``name`` in the skeleton's layout: transposed (``[in, out]`` -> ``[out, in]``) when ``name`` is
    in ``transposed`` (:func:`conv1d_weights`), else as it is. The transpose is its own inverse: the same call
    turns a skeleton tensor back into the files' layout."""
    return tensor.t().contiguous() if name in transposed else tensor
