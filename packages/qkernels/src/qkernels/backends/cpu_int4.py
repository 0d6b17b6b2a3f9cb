"""The AVX2/AVX-512 CPU int4 backend: a compiled kernel over GPTQ-ordered 4-bit words, float32 compute.

Runtime form ("kn8"): int32 ``[in/8, out]``, nibble ``j`` of word ``[kb, n]`` is the code of input
``8 kb + j`` for output ``n``. That is the ``qweight`` of a 4-bit ``gptq``/``gptq_v2`` checkpoint packed in
int32 words, so for those (without act-order) the kernel reads the checkpoint buffer itself and the module
holds one copy of the codes (``in * out / 2`` bytes) plus float32 scales and zeros ``[G, out]``. Other
layouts, and act-order (input columns sorted by group), are repacked once at build.

Per call, ``x [M, in]`` takes one of three paths by its row count ``M`` (all computed in float32):

* ``M < dequant_from`` (decode): the decode-as-you-go kernel (exact codes, ``s * (sum x q - z * sum x)`` per
  group; 16-output AVX-512 vectors where the host has them, else 8-output AVX2 ones, the same bits).
* ``dequant_from <= M < tiles_from`` (short prefill): the fused kernel, a blocked GEMM whose weight panels of 32
  output columns are dequantized to float32 ``s * (q - z)`` straight into the packed form its micro-kernel
  reads (AVX-512 where the host has it, else AVX2; a per-thread panel buffer, no separate dequantization
  pass). Each output is one fused multiply-add chain over the inputs in order, so the result does not depend
  on the ISA, the thread count or the row count.
* ``M >= tiles_from`` (long prefill; at one torch thread, or at any count when ``tiles_from`` is passed):
  ``prefill_tile(M, in, out)`` output columns at a time are dequantized
  into one float32 scratch tile and multiplied with ``at::mm`` (the library GEMM's blocking wins once the
  GEMM dominates); from ``WHOLE_WEIGHT_FROM`` rows the whole weight is dequantized into one per-call scratch
  when it fits ``WHOLE_WEIGHT_BUDGET`` bytes, so the activations are streamed through the GEMM once.

No dense copy of the weight is kept between calls. Activations of any float dtype are computed in float32
(bfloat16/float16 inputs convert exactly) and the result is cast back. A partial last group is served (its
width is then a multiple of 32, since ``in_features % 64 == 0``).
"""

from __future__ import annotations

import numpy as np
import torch

from ..capabilities import Capabilities
from ..checkpoint import LoadedCheckpoint
from ..contract import KernelContract
from ..cpu_extension import extension_reasons, load_extension
from ..device import Target
from ..errors import KernelInputError
from ..int4_packing import pack_rows_gptq
from ..module import QuantLinear, integer_weight
from ..registry import register_backend

# Row-count switches and tile widths, measured on the 2-core development host (an AVX-512 Xeon; AVX2 figures
# with MKL restricted to AVX2) with the shapes 1536x576, 576x1536, 2048x2048 and 4096x4096: see
# docs/backends.md, Performance.
DEQUANT_FROM = 8  # rows from which the fused kernel replaces the decode kernel (both ISAs)
TILES_FROM = {"avx512": 128, "avx2": 256}  # rows from which dequantized tiles + at::mm replace the fused kernel
# With more than one torch thread the default keeps the fused kernel at every row count: at::mm's OpenMP team
# waits at its barrier for a descheduled thread on a shared host (2 threads, load average 15: tiles ran at
# 0.15x to 1.13x dense from 128 to 512 rows, the fused kernel at 0.78x to 4.7x).
SHORT_TILE = 128  # output columns per float32 scratch tile [in, 128] below LONG_FROM rows
LONG_FROM = 256
LONG_TILE = 512  # from LONG_FROM rows
WHOLE_WEIGHT_FROM = 1024  # from here the whole weight is dequantized at once when it fits the budget
WHOLE_WEIGHT_BUDGET = 64 * 2**20  # bytes of the per-call float32 scratch [in, out]
HUGE_TILE = 2048  # from WHOLE_WEIGHT_FROM rows when the whole weight does not fit
_DIRECT_FORMATS = frozenset({"gptq", "gptq_v2"})  # 4-bit int32 qweight is already the kn8 layout


@register_backend
class CpuInt4Linear(QuantLinear):
    """4-bit GPTQ/AWQ/GGUF-Q4_0 weights on the AVX2 kernel (float32 compute for every activation dtype)."""

    NAME = "cpu_int4"
    _perm: torch.Tensor | None  # int64 [in] act-order input permutation (a registered buffer)
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
        out_multiple=8,
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

    def __init__(
        self,
        loaded: LoadedCheckpoint,
        target: Target,
        *,
        dequant_from: int | None = None,
        tiles_from: int | None = None,
    ) -> None:
        super().__init__(loaded, target)
        self._ext = load_extension()
        self.isa: str = self._ext.fused_isa()
        self.dequant_from = _row_option("dequant_from", dequant_from, DEQUANT_FROM)
        self.tiles_from = _row_option("tiles_from", tiles_from, TILES_FROM[self.isa])  # at one torch thread
        self.threaded_tiles_from = None if tiles_from is None else self.tiles_from  # at more (None: never)
        w = integer_weight(loaded.logical, self.NAME)
        self._group = w.in_features if w.group_size == -1 else w.group_size
        self.register_buffer("_perm", None, persistent=False)  # act-order input permutation, when needed
        if _reads_qweight(loaded, w):
            self._kn8_name = "qweight"  # the checkpoint buffer itself
        else:
            codes = w.codes
            if not w.has_default_g_idx():
                order = np.argsort(w.g_idx, kind="stable")
                self.register_buffer("_perm", torch.from_numpy(order.astype(np.int64)), persistent=False)
                codes = codes[:, order]
            self._kn8_name = "_kn8"
            self.register_buffer(
                "_kn8", pack_rows_gptq(torch.from_numpy(np.ascontiguousarray(codes.T))), persistent=False
            )
        self.register_buffer("_scales", torch.from_numpy(w.scales.astype(np.float32)).contiguous(), persistent=False)
        self.register_buffer("_zeros", torch.from_numpy(w.zeros.astype(np.float32)).contiguous(), persistent=False)

    def path_for(self, rows: int, threads: int | None = None) -> str:
        """The path a call of ``rows`` activation rows takes at ``threads`` torch threads (default: the current
        count): ``"decode"``, ``"fused"`` or ``"tiles"``."""
        if rows < self.dequant_from:
            return "decode"
        threads = torch.get_num_threads() if threads is None else threads
        tiles_from = self.tiles_from if threads == 1 else self.threaded_tiles_from
        return "tiles" if tiles_from is not None and rows >= tiles_from else "fused"

    def _matmul(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        if self._perm is not None:
            x = x.index_select(1, self._perm)
        words = getattr(self, self._kn8_name)
        rows = x.shape[0]
        path = self.path_for(rows)
        if path == "tiles":
            tile = prefill_tile(rows, x.shape[1], words.shape[1])
            y: torch.Tensor = self._ext.int4_kn8_dequant_mm(x, words, self._scales, self._zeros, self._group, tile)
        elif path == "fused":
            y = self._ext.int4_kn8_fused_mm(x.contiguous(), words, self._scales, self._zeros, self._group, self.isa)
        else:
            y = self._ext.int4_kn8_gemv(x.contiguous(), words, self._scales, self._zeros, self._group, self.isa)
        return y if dtype == torch.float32 else y.to(dtype)


def prefill_tile(rows: int, in_features: int, out_features: int) -> int:
    """Output columns dequantized per float32 scratch tile ``[in_features, tile]`` for a call of ``rows``
    activation rows on the dequantize + GEMM path (a multiple of 8, at most ``out_features``).

    Narrow tiles stay in cache while few rows reuse them; wide ones stream the activations fewer times,
    which wins once the GEMM dominates; the whole weight when ``4 * in * out <= WHOLE_WEIGHT_BUDGET``.
    """
    if rows >= WHOLE_WEIGHT_FROM:
        tile = out_features if 4 * in_features * out_features <= WHOLE_WEIGHT_BUDGET else HUGE_TILE
    else:
        tile = SHORT_TILE if rows < LONG_FROM else LONG_TILE
    return min(tile, out_features)


def _row_option(name: str, value: object, default: int) -> int:
    """A row-count switch option, checked (an int >= 1); ``default`` when None."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise KernelInputError(f"cpu_int4 option {name}: expected an int >= 1, found {value!r}")
    return value


def _reads_qweight(loaded: LoadedCheckpoint, w: object) -> bool:
    """Whether the checkpoint's ``qweight`` is already the kernel's kn8 words (4-bit GPTQ, int32, no act-order)."""
    q = loaded.tensors.get("qweight")
    return (
        loaded.format in _DIRECT_FORMATS
        and loaded.meta.pack_dtype == "int32"
        and w.has_default_g_idx()  # type: ignore[attr-defined]
        and q is not None
        and q.dtype == np.int32
        and q.shape == (loaded.meta.in_features // 8, loaded.meta.out_features)
    )
