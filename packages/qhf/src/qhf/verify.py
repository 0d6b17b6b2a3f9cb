"""Verify-after-save: reload what was written and compare it with the in-memory quantized model.

Three checks, all reported: (1) every quantized module's dequantized weight read back from the files
equals the in-memory logical weight's dequantization bit for bit; (2) every other tensor equals the
in-memory (or source) tensor in the stored dtype; (3) logits of a probe input through the reloaded
model agree with the in-memory model within ``atol`` (both run the same kernels on the same machine).
The reloaded model's quantized modules are always built from the files; tensors that check (2) proved
bit-identical, and whose stored values read in the dtype the reload builds (``dtype``) are the in-memory
tensor's bit for bit, are shared with the in-memory model instead of being read a second time (a bfloat16 8B
model's embeddings and head are 2.1 GB).

A streaming run (``QuantModel.quantize(keep_in_memory=False)``) has no quantized model in memory: ``spill``
(its :class:`~qhf.spill.SpillArea`) is then given and (1) decodes each module's logical weight from its spill
file, one module at a time; (2) compares released layers' tensors with the spilled ones; (3) computes both
probe logits one decoder layer at a time (``expected_logits``: from the spill, the reloaded: from the files;
:mod:`qhf.verify_streaming`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from qformats.layouts.families import family_of
from torch import nn

from .architectures.conv1d import conv1d_weights, skeleton_layout
from .checkpoint_reader import open_quantized_checkpoint
from .errors import VerificationError
from .live_tensors import live_tensor
from .results import QuantizedModules
from .spill import SpillArea


@dataclass
class VerificationReport:
    """``modules_checked``/``tensors_checked`` counts; ``max_logit_diff``; ``problems`` (empty = passed)."""

    modules_checked: int = 0
    tensors_checked: int = 0
    max_logit_diff: float | None = None
    probe_tokens: int = 0
    backends: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "modules_checked": self.modules_checked,
            "tensors_checked": self.tensors_checked,
            "max_logit_diff": self.max_logit_diff,
            "probe_tokens": self.probe_tokens,
            "backends": dict(self.backends),
            "problems": list(self.problems),
        }


#: elements :func:`equal_in_dtype` converts at a time (64 MiB of float32)
COMPARE_CHUNK = 16 * 2**20


def equal_in_dtype(reference: torch.Tensor, other: torch.Tensor, dtype: torch.dtype) -> bool:
    """``torch.equal(reference, other.to(dtype))`` for a ``reference`` already in ``dtype``, without a converted
    copy of ``other``: same shape, then the flat values compared :data:`COMPARE_CHUNK` elements at a time (an
    8B model's embeddings are 1 GB in float16)."""
    if tuple(reference.shape) != tuple(other.shape) or reference.dtype != dtype:
        return False
    ref, oth = reference.reshape(-1), other.reshape(-1)
    for start in range(0, ref.numel(), COMPARE_CHUNK):
        stop = start + COMPARE_CHUNK
        if not torch.equal(ref[start:stop], oth[start:stop].to(dtype)):
            return False
    return True


def _expected_tensor(model: nn.Module, spill: SpillArea | None, name: str) -> torch.Tensor | None:
    """The in-memory tensor ``name``, else (streaming) the spilled one, else None (the source's is expected)."""
    value = live_tensor(model, name)
    if value is None and spill is not None:
        value = spill.dense(name)
    return value


def verify_checkpoint(
    directory: str | Path,
    model: nn.Module,
    results: QuantizedModules,
    stored: Any,
    probe_ids: Sequence[int],
    *,
    atol: float = 1e-3,
    dtype: torch.dtype = torch.float32,
    spill: SpillArea | None = None,
    expected_logits: Callable[[torch.Tensor], torch.Tensor] | None = None,
    layers_path: str = "model.layers",
) -> VerificationReport:
    """Run the three checks; ``stored(name)`` gives a non-quantized tensor as the source stores it.

    ``dtype``: the in-memory model's compute dtype; the reloaded model is built in it, so both run the
    same kernels on the same activations (a bfloat16 model against a float32 reload differs by the
    rounding of 30 layers, not by what was saved). Streaming (module docstring): ``spill``,
    ``expected_logits(ids)`` (float32 ``[1, tokens, vocab]``) and the decoder layers' ``layers_path``."""
    from qlooper.allocator import release_free_memory

    from .load_quantized import build_quantized_model

    report = VerificationReport()
    checkpoint = open_quantized_checkpoint(directory)
    for name, result in results.items():
        weight = result.logical()  # decoded from the spill file when the run streamed
        try:
            out_features, in_features = family_of(weight).shape(weight)  # its family's logical dims
            back = checkpoint.module_logical(name, in_features, out_features)
        except (ValueError, KeyError) as exc:
            report.problems.append(f"{name}: cannot unpack the saved tensors: {exc}")
            continue
        if not np.array_equal(back.dequantize(), weight.dequantize()):
            diff = float(np.abs(back.dequantize() - weight.dequantize()).max())
            report.problems.append(f"{name}: saved dequantized weight differs (max abs diff {diff:.3g})")
        report.modules_checked += 1
        del weight, back
    quantized_prefixes = tuple(n + "." for n in results)
    identical: dict[str, torch.Tensor] = {}  # in-memory tensors proven equal to the saved ones
    transposed = conv1d_weights(model)  # a dense Conv1D's weight: [in, out] in the file, [out, in] in the model
    for name in checkpoint.reader.names():
        if name.startswith(quantized_prefixes) and not name.endswith(".bias"):
            continue
        saved = skeleton_layout(name, checkpoint.reader.get(name), transposed)
        live = _expected_tensor(model, spill, name)
        expected = live.detach() if live is not None else stored(name)
        if not equal_in_dtype(saved, expected, saved.dtype):
            report.problems.append(f"{name}: saved tensor differs from the in-memory one")
        elif live is not None and live.dtype == dtype and (saved.dtype == dtype or equal_in_dtype(live, saved, dtype)):
            if spill is None or name not in spill.dense_index:  # a spilled tensor was read for this check only
                identical[name] = live.detach()  # what the reload reads (the file's tensor in ``dtype``), bit for bit
        report.tensors_checked += 1
        del saved, expected
    ids = torch.tensor([list(probe_ids)], dtype=torch.long)
    report.probe_tokens = ids.shape[1]
    if spill is not None:
        from .verify_streaming import reloaded_logits

        if expected_logits is None:
            raise VerificationError("verify_checkpoint: a streaming run's verify needs expected_logits")
        mine = expected_logits(ids)
        release_free_memory()
        theirs = reloaded_logits(checkpoint, layers_path, dtype, identical.get, ids, report.backends)
    else:
        with torch.no_grad():
            mine = model(input_ids=ids, use_cache=False).logits.float()
        release_free_memory()  # what the comparisons above freed, before a second model is built
        reloaded, backends = build_quantized_model(checkpoint, dtype=dtype, shared=identical.get)
        for backend in backends.values():
            report.backends[backend] = report.backends.get(backend, 0) + 1
        with torch.no_grad():
            theirs = reloaded(input_ids=ids, use_cache=False).logits.float()
    report.max_logit_diff = float((mine - theirs).abs().max())
    if not report.max_logit_diff <= atol:
        report.problems.append(f"probe logits differ by {report.max_logit_diff:.3g} (> atol {atol})")
    return report


def raise_on_failure(report: VerificationReport, directory: str | Path) -> None:
    if not report.passed:
        shown = "; ".join(report.problems[:5])
        raise VerificationError(f"{directory}: verify-after-save found {len(report.problems)} problem(s): {shown}")
