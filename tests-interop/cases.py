"""The interop cases: (format, bits, sym, lowbit method) and the layout each is re-saved in."""

from __future__ import annotations

import numpy as np
import torch

# format, bits, sym, method lowbit quantizes with (the reference uses GPTQ, or AWQ for gemm)
CASES = [
    ("gptq", 4, True, "gptq"),
    ("gptq_v2", 4, False, "gptq"),
    ("gptq_p", 3, True, "gptq"),
    ("gemm", 4, False, "awq"),
]
IDS = [c[0] for c in CASES]
RESAVE_AS = {"gptq": "gptq_v2", "gptq_v2": "gptq_p", "gptq_p": "gptq_v2", "gemm": "gptq_v2"}


def as_dtype(dense: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    """lowbit's exact float32 dequantization rounded once to the reference's compute dtype."""
    return torch.from_numpy(dense).to(dtype)


def assert_logits_close(ours: torch.Tensor, theirs: torch.Tensor, *, rel: float = 0.01) -> None:
    """Max abs difference within ``rel`` of the logits' scale, and near-identical direction."""
    scale = float(theirs.abs().max())
    diff = float((ours - theirs).abs().max())
    assert diff <= rel * scale, f"logits differ by {diff} (scale {scale})"
    cos = torch.nn.functional.cosine_similarity(ours.flatten(), theirs.flatten(), dim=0)
    assert float(cos) > 0.9999, float(cos)
