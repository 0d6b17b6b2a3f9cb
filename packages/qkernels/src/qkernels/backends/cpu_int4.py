"""The AVX2 CPU int4 backend: a compiled kernel that decodes nibbles straight into float32 FMAs.

Packing (block64, built at load from the logical codes): per output row and 64-input block, eight int32
words; nibble ``j`` of word ``i`` is the code of input ``64*b + 8*j + i``. The kernel accumulates
``A_g = sum x * (1 + q/16)`` per group and scales by ``16 s``; the zero term ``s (16 + z) X_g`` is
subtracted with one small matmul, so asymmetric zeros are exact. Activations of any float dtype are
computed in float32 (bfloat16/float16 inputs convert exactly) and the result is cast back. Act-order
permutes the input columns (groups must then each hold ``group_size`` columns). A partial last group is
served (its width is then a multiple of 32, since ``in_features % 64 == 0``).
"""

from __future__ import annotations

import numpy as np
import torch

from ..capabilities import Capabilities
from ..checkpoint import LoadedCheckpoint
from ..contract import KernelContract
from ..cpu_extension import extension_reasons, load_extension
from ..device import Target
from ..module import QuantLinear, integer_weight
from ..registry import register_backend

BUFFERED_FROM = 4  # activation rows from which the kernel decodes each group once and reuses it


def pack_block64(codes: np.ndarray) -> torch.Tensor:
    """uint8 codes ``[N, K]`` (K % 64 == 0) -> int32 ``[N, K/64, 8]`` block64 words."""
    n, k = codes.shape
    c = torch.from_numpy(codes.astype(np.int64)).reshape(n, k // 64, 8, 8)  # [n, b, j, i]
    words = (c << (4 * torch.arange(8, dtype=torch.int64)).view(1, 1, 8, 1)).sum(2)  # [n, b, i]
    words = torch.where(words >= 2**31, words - 2**32, words)
    return words.to(torch.int32).contiguous()


@register_backend
class CpuInt4Linear(QuantLinear):
    """4-bit GPTQ/AWQ/GGUF-Q4_0 weights on the AVX2 kernel (float32 compute for every activation dtype)."""

    NAME = "cpu_int4"
    REQUIRES = "an AVX2/FMA CPU and a C++ toolchain (c++, ninja) for the one-time build"
    CAPS = Capabilities(
        methods=frozenset({"gptq", "awq", "gguf"}),
        formats=frozenset({"gptq", "gptq_v2", "gptq_p", "gemm", "gemv", "gguf", "marlin", "awq_marlin"}),
        bits=frozenset({4}),
        group_sizes=None,
        sym=frozenset({True, False}),
        act_order=True,
        devices=frozenset({"cpu"}),
        dtypes=frozenset({torch.float32, torch.bfloat16, torch.float16}),
        pack_dtypes=None,
        priority=120,
        in_multiple=64,
        out_multiple=4,
        group_multiple=32,
    )

    @classmethod
    def runtime_reasons(cls, contract: KernelContract, target: Target) -> list[str]:
        return extension_reasons()

    @classmethod
    def weight_reasons(cls, logical: object) -> list[str]:
        w = integer_weight(logical, cls.NAME)
        if w.has_default_g_idx():
            return []
        counts = np.bincount(w.g_idx, minlength=w.num_groups)
        full = w.in_features // w.group_size
        expected = np.full(w.num_groups, w.group_size)
        expected[full:] = w.in_features - full * w.group_size
        if not np.array_equal(counts, expected):
            return [f"act-order g_idx groups are not all of size {w.group_size} (found sizes {sorted(set(counts))})"]
        return []

    def __init__(self, loaded: LoadedCheckpoint, target: Target) -> None:
        super().__init__(loaded, target)
        self._ext = load_extension()
        w = integer_weight(loaded.logical, self.NAME)
        codes = w.codes
        if w.has_default_g_idx():
            self._perm: torch.Tensor | None = None
        else:
            order = np.argsort(w.g_idx, kind="stable")
            self.register_buffer("_perm", torch.from_numpy(order.astype(np.int64)), persistent=False)
            codes = codes[:, order]
        self._group = w.in_features if w.group_size == -1 else w.group_size
        self._partial = w.in_features % self._group != 0
        s = torch.from_numpy(w.scales.astype(np.float32))  # [G, N]
        z = torch.from_numpy(w.zeros.astype(np.float32))
        self.register_buffer("_words", pack_block64(codes), persistent=False)
        self.register_buffer("_s16", (16.0 * s).T.contiguous(), persistent=False)  # [N, G]
        self.register_buffer("_zero_term", (s * (16.0 + z)).contiguous(), persistent=False)  # [G, N]

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        if self._perm is not None:
            x = x.index_select(1, self._perm)
        x = x.contiguous()
        y = self._ext.int4_block64_mm(x, self._words, self._s16, self._group, BUFFERED_FROM)
        groups = self._zero_term.shape[0]
        padded = torch.nn.functional.pad(x, (0, groups * self._group - x.shape[1])) if self._partial else x
        group_sums = padded.view(x.shape[0], groups, self._group).sum(-1)  # [M, G]
        y = torch.addmm(y, group_sums, self._zero_term, alpha=-1.0)
        return y if dtype == torch.float32 else y.to(dtype)
