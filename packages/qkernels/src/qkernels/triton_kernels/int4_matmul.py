"""Triton 4-bit dequant-matmul kernels for the GPTQ and AWQ-GEMM packings.

Both compute ``out[m, n] = sum_k x[m, k] * s[g(k), n] * (q[k, n] - z[g(k), n])`` with float32
accumulation, one ``[BLOCK_M, BLOCK_N]`` output tile per program.

* GPTQ: ``qweight [ceil(K/8), N]`` int32, code of row ``k`` at bits ``4*(k % 8)`` of word ``k // 8``;
  ``qzeros [G, ceil(N/8)]`` int32, zero of column ``n`` at bits ``4*(n % 8)``; ``g(k) = g_idx[k]`` (act-order
  capable).
* AWQ GEMM: ``qweight [K, ceil(N/8)]`` int32 packed along outputs with the order map: column ``n`` sits
  in nibble slot ``(j >> 1) + 4 * (j & 1)`` where ``j = n % 8``; ``qzeros`` likewise; ``g(k) = k // group``.

``scales`` are ``[G, N]`` float32. Whether these run compiled (GPU) or in Triton's interpreter (CPU) is
decided when this module is imported, from ``TRITON_INTERPRET``.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

INTERPRETED: bool = bool(triton.knobs.runtime.interpret)


@triton.jit
def _gptq_int4_kernel(
    x_ptr, qw_ptr, s_ptr, qz_ptr, g_ptr, out_ptr, M, N, K,
    stride_xm, stride_xk, stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    zshift = (offs_n % 8) * 4
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
            mask=mask_m[:, None] & mask_k[None, :],
            other=0.0,
        )
        mask_kn = mask_k[:, None] & mask_n[None, :]
        qw = tl.load(qw_ptr + (offs_k // 8)[:, None] * stride_qk + offs_n[None, :] * stride_qn, mask=mask_kn, other=0)
        q = (qw >> ((offs_k % 8) * 4)[:, None]) & 0xF
        g = tl.load(g_ptr + offs_k, mask=mask_k, other=0)
        s = tl.load(s_ptr + g[:, None] * stride_sg + offs_n[None, :] * stride_sn, mask=mask_kn, other=0.0)
        qz = tl.load(qz_ptr + g[:, None] * stride_zg + (offs_n // 8)[None, :] * stride_zn, mask=mask_kn, other=0)
        z = (qz >> zshift[None, :]) & 0xF
        w = (q - z).to(tl.float32) * s
        if IEEE:  # float32 activations, or the interpreter (whose low-precision dot is unreliable)
            acc += tl.dot(x.to(tl.float32), w.to(x.dtype).to(tl.float32), input_precision="ieee")
        else:
            acc += tl.dot(x, w.to(x.dtype))
    out = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _awq_int4_kernel(
    x_ptr, qw_ptr, s_ptr, qz_ptr, out_ptr, M, N, K, GROUP,
    stride_xm, stride_xk, stride_qk, stride_qn, stride_sg, stride_sn, stride_zg, stride_zn, stride_om, stride_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    j = offs_n % 8
    shift = ((j >> 1) + 4 * (j & 1)) * 4
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < K
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + offs_k[None, :] * stride_xk,
            mask=mask_m[:, None] & mask_k[None, :],
            other=0.0,
        )
        mask_kn = mask_k[:, None] & mask_n[None, :]
        qw = tl.load(qw_ptr + offs_k[:, None] * stride_qk + (offs_n // 8)[None, :] * stride_qn, mask=mask_kn, other=0)
        q = (qw >> shift[None, :]) & 0xF
        g = offs_k // GROUP
        s = tl.load(s_ptr + g[:, None] * stride_sg + offs_n[None, :] * stride_sn, mask=mask_kn, other=0.0)
        qz = tl.load(qz_ptr + g[:, None] * stride_zg + (offs_n // 8)[None, :] * stride_zn, mask=mask_kn, other=0)
        z = (qz >> shift[None, :]) & 0xF
        w = (q - z).to(tl.float32) * s
        if IEEE:  # float32 activations, or the interpreter (whose low-precision dot is unreliable)
            acc += tl.dot(x.to(tl.float32), w.to(x.dtype).to(tl.float32), input_precision="ieee")
        else:
            acc += tl.dot(x, w.to(x.dtype))
    out = out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _blocks(m: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K): small M tiles for decode, larger for prefill; wide tiles interpreted."""
    if INTERPRETED:
        return 16, 64, 64
    return (16, 32, 64) if m <= 16 else (64, 64, 32)  # narrow N tiles give decode enough programs


def gptq_int4_matmul(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, g_idx: torch.Tensor, n: int
) -> torch.Tensor:
    """``x [M, K]`` (float32/bfloat16/float16) -> ``[M, n]`` in ``x.dtype`` (GPTQ packing, see module doc)."""
    m, k = x.shape
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    bm, bn, bk = _blocks(m)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    _gptq_int4_kernel[grid](
        x, qweight, scales, qzeros, g_idx, out, m, n, k,
        x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1), scales.stride(0), scales.stride(1),
        qzeros.stride(0), qzeros.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, IEEE=INTERPRETED or x.dtype == torch.float32,
    )  # fmt: skip
    return out


def awq_int4_matmul(
    x: torch.Tensor, qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor, group: int, n: int
) -> torch.Tensor:
    """``x [M, K]`` -> ``[M, n]`` in ``x.dtype`` (AWQ GEMM packing; ``group`` input columns per group)."""
    m, k = x.shape
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    bm, bn, bk = _blocks(m)
    grid = (triton.cdiv(m, bm), triton.cdiv(n, bn))
    _awq_int4_kernel[grid](
        x, qweight, scales, qzeros, out, m, n, k, group,
        x.stride(0), x.stride(1), qweight.stride(0), qweight.stride(1), scales.stride(0), scales.stride(1),
        qzeros.stride(0), qzeros.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, IEEE=INTERPRETED or x.dtype == torch.float32,
    )  # fmt: skip
    return out
