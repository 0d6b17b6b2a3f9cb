// qkernels AVX2 int4 linear (CPU). Built on first use by qkernels.cpu_extension (torch cpp_extension).
//
// Weight layout ("kn8", the GPTQ qweight layout for 4-bit int32 words): w[kb, n] is an int32 word whose
// nibble j (bits 4j..4j+3) holds the code q of input k = 8 kb + j for output n; w is [K/8, N] row-major,
// so one 256-bit load gives eight consecutive outputs. Scales s and zero points z are float32 [G, N].
// Every path computes y[m, n] = sum_g s[g, n] * sum_{k in g} x[m, k] (q[k, n] - z[g, n]).
//
// gemv path (few activation rows): codes are decoded exactly (mask in place, convert to float: q * 16^j'),
// multiplied by x scaled by 16^-j' (exact powers of two), accumulated per group and combined as
// s * (sum x q - z * X_g), X_g = sum of x over the group.
// fused path (short prefill): a blocked GEMM over weight panels dequantized straight into its packed form
// (AVX-512 where the host has it, else AVX2; see the section below).
// dequant path (long prefill): a tile of output columns is dequantized to float32 s * (q - z) (bit-identical to
// the reference dequantization) into a scratch buffer, and multiplied with at::mm; only one tile is alive.
//
// Threads: a small pool of helper threads pulls chunks of work from a shared counter while the calling
// thread does the same; the caller never waits for a helper that has not started, only for chunks that a
// helper has claimed. (An OpenMP region's closing barrier waits for every team thread; on a loaded host a
// descheduled helper then costs a whole scheduler slice, several milliseconds, per call.)
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

// ---------------------------------------------------------------------------------------------------------
// Work sharing.
class ChunkPool {
 public:
  using Fn = std::function<void(int64_t)>;

  // Runs fn(c) for every c in [0, chunks) on the calling thread and up to threads - 1 helpers.
  void run(int64_t chunks, int threads, const Fn& fn) {
    if (threads <= 1 || chunks <= 1) {
      for (int64_t c = 0; c < chunks; ++c) fn(c);
      return;
    }
    std::lock_guard<std::mutex> one_job(submit_);
    uint32_t gen;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(helpers_) < threads - 1) {
        std::thread(&ChunkPool::loop, this, static_cast<int>(helpers_)).detach();
        ++helpers_;
      }
      gen = ++gen_;
      fn_ = &fn;
      total_ = chunks;
      wanted_ = threads - 1;
      done_.store(0, std::memory_order_relaxed);
      state_.store(static_cast<uint64_t>(gen) << 32, std::memory_order_release);
    }
    wake_.notify_all();
    work(gen, &fn, chunks);
    for (int spin = 0; done_.load(std::memory_order_acquire) < chunks; ++spin) {
      if (spin < 2048)
        _mm_pause();
      else
        std::this_thread::yield();
    }
  }

 private:
  // Claims chunks of job `gen` until none is left (or a newer job replaced it) and runs them.
  void work(uint32_t gen, const Fn* fn, int64_t total) {
    for (;;) {
      uint64_t s = state_.load(std::memory_order_acquire);
      for (;;) {
        if ((s >> 32) != gen || static_cast<int64_t>(s & 0xffffffffu) >= total) return;
        if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) break;
      }
      (*fn)(static_cast<int64_t>(s & 0xffffffffu));
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  void loop(int id) {
    uint32_t seen = 0;
    for (;;) {
      const Fn* fn;
      int64_t total;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return gen_ != seen; });
        seen = gen_;
        if (id >= wanted_) continue;
        fn = fn_;
        total = total_;
      }
      work(seen, fn, total);
    }
  }

  std::mutex submit_;  // one job at a time
  std::mutex mutex_;   // guards the job description below
  std::condition_variable wake_;
  size_t helpers_ = 0;
  uint32_t gen_ = 0;
  const Fn* fn_ = nullptr;
  int64_t total_ = 0;
  int wanted_ = 0;
  std::atomic<uint64_t> state_{0};  // (job generation << 32) | next unclaimed chunk
  std::atomic<int64_t> done_{0};    // chunks of the current job finished
};

ChunkPool& pool() {
  static ChunkPool* p = new ChunkPool();  // never destroyed: detached helpers may outlive static destruction
  return *p;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------------------------------------
// gemv path.

// Codes of nibble j (0..3) of each lane, kept in place: q * 16^j as float (exact).
inline __m256 low_nibble(__m256i v, int j) {
  return _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0xF << (4 * j))));
}

// Word rows read ahead by software prefetch: consecutive rows lie N words apart (a new page each for wide
// layers), which the hardware prefetchers do not follow, so a call from L3 or memory waited on every row.
// Prefetching never faults, also past the end of w.
constexpr int64_t kAhead = 8;

// MR activation rows x NV vectors of eight outputs starting at n0. xs: activations scaled per input by
// 16^-(j mod 4) (j = k mod 8); xg: [M, G] group sums of the unscaled activations.
template <int MR, int NV>
void gemv_block(const float* xs, const float* xg, int64_t K, const int32_t* w, int64_t N, const float* s,
                const float* z, int64_t G, int64_t group, float* out, int64_t m0, int64_t n0) {
  __m256 total[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) total[r][v] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m256 acc[MR][NV];
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
    const int64_t kb1 = std::min(K, (g + 1) * group) / 8;
    for (int64_t kb = g * group / 8; kb < kb1; ++kb) {
      __m256i words[NV];
      for (int v = 0; v < NV; ++v) {
        words[v] = _mm256_loadu_si256((const __m256i*)(w + kb * N + n0 + 8 * v));
        _mm_prefetch(reinterpret_cast<const char*>(w + (kb + kAhead) * N + n0 + 8 * v), _MM_HINT_T0);
      }
      for (int half = 0; half < 2; ++half) {
        for (int j = 0; j < 4; ++j) {
          __m256 xb[MR];
          for (int r = 0; r < MR; ++r) xb[r] = _mm256_broadcast_ss(xs + (m0 + r) * K + 8 * kb + 4 * half + j);
          for (int v = 0; v < NV; ++v) {
            const __m256 q = low_nibble(words[v], j);
            for (int r = 0; r < MR; ++r) acc[r][v] = _mm256_fmadd_ps(xb[r], q, acc[r][v]);
          }
        }
        for (int v = 0; v < NV; ++v) words[v] = _mm256_srli_epi32(words[v], 16);
      }
    }
    for (int v = 0; v < NV; ++v) {
      const __m256 sv = _mm256_loadu_ps(s + g * N + n0 + 8 * v);
      const __m256 zv = _mm256_loadu_ps(z + g * N + n0 + 8 * v);
      for (int r = 0; r < MR; ++r) {
        const __m256 t = _mm256_fnmadd_ps(zv, _mm256_set1_ps(xg[(m0 + r) * G + g]), acc[r][v]);
        total[r][v] = _mm256_fmadd_ps(t, sv, total[r][v]);
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(out + (m0 + r) * N + n0 + 8 * v, total[r][v]);
}

template <int MR>
void gemv_columns(const float* xs, const float* xg, int64_t K, const int32_t* w, int64_t N, const float* s,
                  const float* z, int64_t G, int64_t group, float* out, int64_t m0, int64_t n0, int64_t n1) {
  constexpr int kWide = MR == 1 ? 4 : 2;  // vectors per block: MR * kWide accumulators fit the 16 registers
  int64_t n = n0;
  for (; n + 8 * kWide <= n1; n += 8 * kWide) gemv_block<MR, kWide>(xs, xg, K, w, N, s, z, G, group, out, m0, n);
  for (; n < n1; n += 8) gemv_block<MR, 1>(xs, xg, K, w, N, s, z, G, group, out, m0, n);
}

// The same block with 16-output AVX-512 vectors: every lane runs the AVX2 block's operations in the same
// order, so the results are the same bits.
inline __attribute__((target("avx512f"))) __m512 low_nibble512(__m512i v, int j) {
  return _mm512_cvtepi32_ps(_mm512_and_si512(v, _mm512_set1_epi32(0xF << (4 * j))));
}

template <int MR, int NV>
__attribute__((target("avx512f"))) void gemv_block512(const float* xs, const float* xg, int64_t K, const int32_t* w,
                                                      int64_t N, const float* s, const float* z, int64_t G,
                                                      int64_t group, float* out, int64_t m0, int64_t n0) {
  __m512 total[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) total[r][v] = _mm512_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    __m512 acc[MR][NV];
    for (int r = 0; r < MR; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    const int64_t kb1 = std::min(K, (g + 1) * group) / 8;
    for (int64_t kb = g * group / 8; kb < kb1; ++kb) {
      __m512i words[NV];
      for (int v = 0; v < NV; ++v) {
        words[v] = _mm512_loadu_si512(w + kb * N + n0 + 16 * v);
        _mm_prefetch(reinterpret_cast<const char*>(w + (kb + kAhead) * N + n0 + 16 * v), _MM_HINT_T0);
      }
      for (int half = 0; half < 2; ++half) {
        for (int j = 0; j < 4; ++j) {
          __m512 xb[MR];
          for (int r = 0; r < MR; ++r) xb[r] = _mm512_set1_ps(xs[(m0 + r) * K + 8 * kb + 4 * half + j]);
          for (int v = 0; v < NV; ++v) {
            const __m512 q = low_nibble512(words[v], j);
            for (int r = 0; r < MR; ++r) acc[r][v] = _mm512_fmadd_ps(xb[r], q, acc[r][v]);
          }
        }
        for (int v = 0; v < NV; ++v) words[v] = _mm512_srli_epi32(words[v], 16);
      }
    }
    for (int v = 0; v < NV; ++v) {
      const __m512 sv = _mm512_loadu_ps(s + g * N + n0 + 16 * v);
      const __m512 zv = _mm512_loadu_ps(z + g * N + n0 + 16 * v);
      for (int r = 0; r < MR; ++r) {
        const __m512 t = _mm512_fnmadd_ps(zv, _mm512_set1_ps(xg[(m0 + r) * G + g]), acc[r][v]);
        total[r][v] = _mm512_fmadd_ps(t, sv, total[r][v]);
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(out + (m0 + r) * N + n0 + 16 * v, total[r][v]);
}

template <int MR>
__attribute__((target("avx512f"))) void gemv_columns512(const float* xs, const float* xg, int64_t K,
                                                        const int32_t* w, int64_t N, const float* s, const float* z,
                                                        int64_t G, int64_t group, float* out, int64_t m0, int64_t n0,
                                                        int64_t n1) {
  int64_t n = n0;
  for (; n + 64 <= n1; n += 64) gemv_block512<MR, 4>(xs, xg, K, w, N, s, z, G, group, out, m0, n);
  for (; n + 16 <= n1; n += 16) gemv_block512<MR, 1>(xs, xg, K, w, N, s, z, G, group, out, m0, n);
  for (; n < n1; n += 8) gemv_block<MR, 1>(xs, xg, K, w, N, s, z, G, group, out, m0, n);
}

bool host_has_avx512();

constexpr int64_t kGemvCols = 64;  // output columns per chunk of work

void check_weight(const torch::Tensor& w, const torch::Tensor& s, const torch::Tensor& z, int64_t K, int64_t group) {
  TORCH_CHECK(w.dtype() == torch::kInt32 && w.is_contiguous() && w.dim() == 2, "w: int32 contiguous [K/8, N]");
  const int64_t N = w.size(1);
  TORCH_CHECK(K % 64 == 0 && w.size(0) * 8 == K, "K must be a multiple of 64 with w [K/8, N]");
  TORCH_CHECK(N % 8 == 0, "N must be a multiple of 8");
  TORCH_CHECK(group % 32 == 0 && group > 0, "group must be a positive multiple of 32");
  const int64_t G = ceil_div(K, group);
  for (const auto* t : {&s, &z}) {
    TORCH_CHECK(t->dtype() == torch::kFloat32 && t->is_contiguous() && t->dim() == 2 && t->size(0) == G &&
                    t->size(1) == N,
                "scales/zeros: float32 contiguous [ceil(K / group), N]");
  }
}

// ---------------------------------------------------------------------------------------------------------
// fused path (many rows): a blocked GEMM whose weight panels are dequantized straight into the packed form the
// micro-kernel reads (the step a dense GEMM spends packing its weight), so no separate dequantization pass.
// Panel: kPanel output columns [K, kPanel] float32 s * (q - z) (bit-identical to the reference dequantization),
// in a per-thread buffer (thread_local: concurrent calls never share one). Each output is one fused
// multiply-add chain over k = 0..K-1 in order, whatever the ISA, row block, K block or thread count, so the
// result does not depend on them (it differs from a library GEMM's summation order only in float rounding).

constexpr int64_t kPanel = 32;   // output columns per panel: two 16-float AVX-512 vectors, four AVX2 ones
constexpr int64_t kKBlock = 256; // inputs per K block: a [256, 32] float32 panel slice is 32 KiB (L1)
constexpr int64_t kMBlock = 256; // activation rows per row block (their [256, 256] slice stays in L2)

// Dequantizes word rows [kb0, kb1) of output columns [n0, n0 + cols) (cols <= kPanel, a multiple of 8) into
// panel rows 8 * (kb - kb0) + j, kPanel floats each; columns past cols are zero.
void dequant_panel_avx2(const int32_t* w, int64_t N, const float* s, const float* z, int64_t group, int64_t kb0,
                        int64_t kb1, int64_t n0, int64_t cols, float* panel) {
  const __m256i mask = _mm256_set1_epi32(0xF);
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const int64_t g = kb * 8 / group;
    float* dst = panel + (kb - kb0) * 8 * kPanel;
    for (int64_t v = 0; v < kPanel; v += 8) {
      if (v >= cols) {
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + j * kPanel + v, _mm256_setzero_ps());
        continue;
      }
      const __m256i words = _mm256_loadu_si256((const __m256i*)(w + kb * N + n0 + v));
      const __m256 sv = _mm256_loadu_ps(s + g * N + n0 + v);
      const __m256 zv = _mm256_loadu_ps(z + g * N + n0 + v);
      for (int j = 0; j < 8; ++j) {
        const __m256 q = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(words, 4 * j), mask));
        _mm256_storeu_ps(dst + j * kPanel + v, _mm256_mul_ps(_mm256_sub_ps(q, zv), sv));
      }
    }
  }
}

// AVX2 micro-kernel: MR rows x kPanel columns over kc inputs, in two halves of 16 columns (two vectors: the
// 2 * MR accumulators fit the 16 registers); c rows ldc apart, the first `cols` columns valid.
template <int MR>
void ukr_avx2(const float* x, const float* b, int64_t kc, float* c, int64_t ldc, int64_t cols,
              bool accumulate) {
  for (int64_t h = 0; h < kPanel && h < cols; h += 16) {
    const bool second = h + 8 < cols;  // the half's second vector holds valid columns
    __m256 acc[MR][2];
    for (int r = 0; r < MR; ++r) {
      acc[r][0] = accumulate ? _mm256_loadu_ps(c + r * ldc + h) : _mm256_setzero_ps();
      acc[r][1] = accumulate && second ? _mm256_loadu_ps(c + r * ldc + h + 8) : _mm256_setzero_ps();
    }
    for (int64_t k = 0; k < kc; ++k) {
      const __m256 b0 = _mm256_load_ps(b + k * kPanel + h), b1 = _mm256_load_ps(b + k * kPanel + h + 8);
      for (int r = 0; r < MR; ++r) {
        const __m256 xb = _mm256_broadcast_ss(x + k * MR + r);
        acc[r][0] = _mm256_fmadd_ps(xb, b0, acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(xb, b1, acc[r][1]);
      }
    }
    for (int r = 0; r < MR; ++r) {
      _mm256_storeu_ps(c + r * ldc + h, acc[r][0]);
      if (second) _mm256_storeu_ps(c + r * ldc + h + 8, acc[r][1]);
    }
  }
}

__attribute__((target("avx512f"))) void dequant_panel_avx512(const int32_t* w, int64_t N, const float* s,
                                                             const float* z, int64_t group, int64_t kb0,
                                                             int64_t kb1, int64_t n0, int64_t cols, float* panel) {
  const __m512i mask = _mm512_set1_epi32(0xF);
  const __mmask16 m0 = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : static_cast<__mmask16>((1u << (cols - 16)) - 1);
  for (int64_t kb = kb0; kb < kb1; ++kb) {
    const int64_t g = kb * 8 / group;
    float* dst = panel + (kb - kb0) * 8 * kPanel;
    const __m512i w0 = _mm512_maskz_loadu_epi32(m0, w + kb * N + n0);
    const __m512i w1 = _mm512_maskz_loadu_epi32(m1, w + kb * N + n0 + 16);
    const __m512 s0 = _mm512_maskz_loadu_ps(m0, s + g * N + n0), s1 = _mm512_maskz_loadu_ps(m1, s + g * N + n0 + 16);
    const __m512 z0 = _mm512_maskz_loadu_ps(m0, z + g * N + n0), z1 = _mm512_maskz_loadu_ps(m1, z + g * N + n0 + 16);
    for (int j = 0; j < 8; ++j) {
      const __m512 q0 = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(w0, 4 * j), mask));
      const __m512 q1 = _mm512_cvtepi32_ps(_mm512_and_si512(_mm512_srli_epi32(w1, 4 * j), mask));
      _mm512_store_ps(dst + j * kPanel, _mm512_mul_ps(_mm512_sub_ps(q0, z0), s0));
      _mm512_store_ps(dst + j * kPanel + 16, _mm512_mul_ps(_mm512_sub_ps(q1, z1), s1));
    }
  }
}

// AVX-512 micro-kernel: MR rows x kPanel columns (two vectors).
template <int MR>
__attribute__((target("avx512f"))) void ukr_avx512(const float* x, const float* b, int64_t kc,
                                                   float* c, int64_t ldc, int64_t cols, bool accumulate) {
  const __mmask16 m0 = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? 0xFFFF : cols <= 16 ? 0 : static_cast<__mmask16>((1u << (cols - 16)) - 1);
  __m512 acc0[MR], acc1[MR];
  for (int r = 0; r < MR; ++r) {
    acc0[r] = accumulate ? _mm512_maskz_loadu_ps(m0, c + r * ldc) : _mm512_setzero_ps();
    acc1[r] = accumulate ? _mm512_maskz_loadu_ps(m1, c + r * ldc + 16) : _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_load_ps(b + k * kPanel), b1 = _mm512_load_ps(b + k * kPanel + 16);
    for (int r = 0; r < MR; ++r) {
      const __m512 xb = _mm512_set1_ps(x[k * MR + r]);
      acc0[r] = _mm512_fmadd_ps(xb, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(xb, b1, acc1[r]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    _mm512_mask_storeu_ps(c + r * ldc, m0, acc0[r]);
    _mm512_mask_storeu_ps(c + r * ldc + 16, m1, acc1[r]);
  }
}

using Ukr = void (*)(const float*, const float*, int64_t, float*, int64_t, int64_t, bool);
using Dequant = void (*)(const int32_t*, int64_t, const float*, const float*, int64_t, int64_t, int64_t, int64_t,
                         int64_t, float*);

// Kernels of one ISA: the micro-kernel for 1..kMaxRows rows, and the panel dequantization.
struct FusedIsa {
  int rows;  // the widest row block
  Ukr ukr[13];
  Dequant dequant;
};

const FusedIsa& fused_avx2() {
  static const FusedIsa isa{6,
                            {nullptr, ukr_avx2<1>, ukr_avx2<2>, ukr_avx2<3>, ukr_avx2<4>, ukr_avx2<5>, ukr_avx2<6>},
                            dequant_panel_avx2};
  return isa;
}

const FusedIsa& fused_avx512() {
  static const FusedIsa isa{12,
                            {nullptr, ukr_avx512<1>, ukr_avx512<2>, ukr_avx512<3>, ukr_avx512<4>, ukr_avx512<5>,
                             ukr_avx512<6>, ukr_avx512<7>, ukr_avx512<8>, ukr_avx512<9>, ukr_avx512<10>,
                             ukr_avx512<11>, ukr_avx512<12>},
                            dequant_panel_avx512};
  return isa;
}

bool host_has_avx512() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// The per-thread panel buffer, 64-byte aligned, at least `floats` long (grows, never shrinks).
float* panel_buffer(int64_t floats) {
  thread_local std::vector<float> storage;
  if (static_cast<int64_t>(storage.size()) < floats + 16) storage.resize(floats + 16);
  const auto address = reinterpret_cast<uintptr_t>(storage.data());
  return storage.data() + ((64 - address % 64) % 64) / sizeof(float);
}

}  // namespace

// x [M, K] float32 contiguous; w [K/8, N] int32 (kn8); s, z [G, N] float32. Returns [M, N] float32.
// isa as for int4_kn8_fused_mm ("auto", "avx2" or "avx512"); both give the same bits.
torch::Tensor int4_kn8_gemv(torch::Tensor x, torch::Tensor w, torch::Tensor s, torch::Tensor z, int64_t group,
                            const std::string& isa) {
  TORCH_CHECK(x.dtype() == torch::kFloat32 && x.is_contiguous() && x.dim() == 2, "x: float32 contiguous [M, K]");
  TORCH_CHECK(isa == "auto" || isa == "avx2" || isa == "avx512", "isa must be auto, avx2 or avx512, got ", isa);
  const bool wide = isa == "avx512" || (isa == "auto" && host_has_avx512());
  TORCH_CHECK(!wide || host_has_avx512(), "isa avx512 requested on a host without AVX-512F");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(1);
  check_weight(w, s, z, K, group);
  const int64_t G = ceil_div(K, group);
  auto out = torch::empty({M, N}, x.options());
  auto xs = torch::empty({M, K}, x.options());
  auto xg = torch::empty({M, G}, x.options());
  const float* xp = x.data_ptr<float>();
  float* xsp = xs.data_ptr<float>();
  float* xgp = xg.data_ptr<float>();
  const float kScale[4] = {1.0f, 1.0f / 16, 1.0f / 256, 1.0f / 4096};
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) xsp[m * K + k] = xp[m * K + k] * kScale[k % 4];
    for (int64_t g = 0; g < G; ++g) {
      float sum = 0.0f;
      for (int64_t k = g * group; k < std::min(K, (g + 1) * group); ++k) sum += xp[m * K + k];
      xgp[m * G + g] = sum;
    }
  }
  const int32_t* wp = w.data_ptr<int32_t>();
  const float* sp = s.data_ptr<float>();
  const float* zp = z.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t chunks = ceil_div(N, kGemvCols);
  pool().run(chunks, at::get_num_threads(), [&](int64_t c) {
    const int64_t n0 = c * kGemvCols, n1 = std::min(N, n0 + kGemvCols);
    int64_t m = 0;
    if (wide) {
      for (; m + 2 <= M; m += 2) gemv_columns512<2>(xsp, xgp, K, wp, N, sp, zp, G, group, op, m, n0, n1);
      for (; m < M; ++m) gemv_columns512<1>(xsp, xgp, K, wp, N, sp, zp, G, group, op, m, n0, n1);
      return;
    }
    for (; m + 2 <= M; m += 2) gemv_columns<2>(xsp, xgp, K, wp, N, sp, zp, G, group, op, m, n0, n1);
    for (; m < M; ++m) gemv_columns<1>(xsp, xgp, K, wp, N, sp, zp, G, group, op, m, n0, n1);
  });
  return out;
}

// Same contract as int4_kn8_gemv: dequantizes `tile` output columns at a time into one float32 scratch
// [K, tile] (s * (q - z), bit-identical to the reference) and multiplies it with at::mm into the output.
torch::Tensor int4_kn8_dequant_mm(torch::Tensor x, torch::Tensor w, torch::Tensor s, torch::Tensor z, int64_t group,
                                  int64_t tile) {
  TORCH_CHECK(x.dtype() == torch::kFloat32 && x.dim() == 2, "x: float32 [M, K]");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(1);
  check_weight(w, s, z, K, group);
  TORCH_CHECK(tile > 0 && tile % 8 == 0, "tile must be a positive multiple of 8");
  const int64_t G = ceil_div(K, group);
  auto out = torch::empty({M, N}, x.options());
  const int64_t width = std::min(tile, N);
  auto scratch = torch::empty({K, width}, x.options());
  const int32_t* wp = w.data_ptr<int32_t>();
  const float* sp = s.data_ptr<float>();
  const float* zp = z.data_ptr<float>();
  float* bp = scratch.data_ptr<float>();
  const int64_t rows_per_chunk = std::max<int64_t>(1, 8192 / width);  // word rows (8 inputs each) per chunk
  for (int64_t n0 = 0; n0 < N; n0 += width) {
    const int64_t cols = std::min(width, N - n0);
    const int64_t chunks = ceil_div(K / 8, rows_per_chunk);
    pool().run(chunks, at::get_num_threads(), [&](int64_t c) {
      const int64_t kb_end = std::min(K / 8, (c + 1) * rows_per_chunk);
      for (int64_t kb = c * rows_per_chunk; kb < kb_end; ++kb) {
        const int64_t g = kb * 8 / group;
        for (int64_t v = 0; v < cols; v += 8) {
          const __m256i words = _mm256_loadu_si256((const __m256i*)(wp + kb * N + n0 + v));
          const __m256 sv = _mm256_loadu_ps(sp + g * N + n0 + v);
          const __m256 zv = _mm256_loadu_ps(zp + g * N + n0 + v);
          const __m256i mask = _mm256_set1_epi32(0xF);
          for (int j = 0; j < 8; ++j) {
            const __m256 q = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(words, 4 * j), mask));
            _mm256_storeu_ps(bp + (kb * 8 + j) * width + v, _mm256_mul_ps(_mm256_sub_ps(q, zv), sv));
          }
        }
      }
    });
    auto dst = out.narrow(1, n0, cols);
    at::mm_out(dst, x, cols == width ? scratch : scratch.narrow(1, 0, cols));
  }
  return out;
}


// Same contract as int4_kn8_gemv, computed by the fused blocked GEMM (see "fused path" above). isa: "auto"
// (AVX-512 where the host has it, else AVX2), "avx2" or "avx512".
torch::Tensor int4_kn8_fused_mm(torch::Tensor x, torch::Tensor w, torch::Tensor s, torch::Tensor z, int64_t group,
                                const std::string& isa) {
  TORCH_CHECK(x.dtype() == torch::kFloat32 && x.is_contiguous() && x.dim() == 2, "x: float32 contiguous [M, K]");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(1);
  check_weight(w, s, z, K, group);
  TORCH_CHECK(isa == "auto" || isa == "avx2" || isa == "avx512", "isa must be auto, avx2 or avx512, got ", isa);
  const bool wide = isa == "avx512" || (isa == "auto" && host_has_avx512());
  TORCH_CHECK(!wide || host_has_avx512(), "isa avx512 requested on a host without AVX-512F");
  const FusedIsa& kern = wide ? fused_avx512() : fused_avx2();
  auto out = torch::empty({M, N}, x.options());
  if (M == 0) return out;
  const float* xp = x.data_ptr<float>();
  const int32_t* wp = w.data_ptr<int32_t>();
  const float* sp = s.data_ptr<float>();
  const float* zp = z.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // Activations packed once per call by row blocks of kern.rows: block b (rows b * R .. b * R + mr) holds
  // x[b * R + r, k] at b * R * K + k * mr + r, so the micro-kernel reads them contiguously (the rows of x
  // itself lie K floats apart, which for K a multiple of 1024 maps them all to one L1 cache set).
  const int64_t R = kern.rows, blocks = ceil_div(M, R);
  auto packed = torch::empty({M * K}, x.options());
  float* xq = packed.data_ptr<float>();
  pool().run(blocks, at::get_num_threads(), [&](int64_t b) {
    const int64_t mr = std::min(R, M - b * R);
    float* dst = xq + b * R * K;
    for (int64_t r = 0; r < mr; ++r) {
      const float* src = xp + (b * R + r) * K;
      for (int64_t k = 0; k < K; ++k) dst[k * mr + r] = src[k];
    }
  });
  const int64_t panels = ceil_div(N, kPanel);
  const int64_t mblock = std::max<int64_t>(R, kMBlock / R * R);
  pool().run(panels, at::get_num_threads(), [&](int64_t p) {
    const int64_t n0 = p * kPanel, cols = std::min(kPanel, N - n0);
    float* panel = panel_buffer(K * kPanel);
    kern.dequant(wp, N, sp, zp, group, 0, K / 8, n0, cols, panel);
    for (int64_t m0 = 0; m0 < M; m0 += mblock) {
      const int64_t m1 = std::min(M, m0 + mblock);
      for (int64_t k0 = 0; k0 < K; k0 += kKBlock) {
        const int64_t kc = std::min(kKBlock, K - k0);
        for (int64_t m = m0; m < m1; m += R) {
          const int64_t mr = std::min(R, m1 - m);
          kern.ukr[mr](xq + m * K + k0 * mr, panel + k0 * kPanel, kc, op + m * N + n0, N, cols, k0 > 0);
        }
      }
    }
  });
  return out;
}

// The ISA int4_kn8_fused_mm(..., "auto") runs on this host: "avx512" or "avx2".
std::string fused_isa() { return host_has_avx512() ? "avx512" : "avx2"; }

// The compute functions release the GIL: calls from several Python threads run at once (each thread has its
// own panel buffer; the helper pool takes one job at a time).
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("fused_isa", &fused_isa, "the ISA of the fused kernel on this host (avx512 or avx2)");
  m.def("int4_kn8_gemv", &int4_kn8_gemv, py::call_guard<py::gil_scoped_release>(), "AVX2 int4 kn8 matmul for few activation rows (see source comment)");
  m.def("int4_kn8_fused_mm", &int4_kn8_fused_mm, py::call_guard<py::gil_scoped_release>(), "int4 kn8: blocked GEMM over panels dequantized in place");
  m.def("int4_kn8_dequant_mm", &int4_kn8_dequant_mm, py::call_guard<py::gil_scoped_release>(), "int4 kn8: dequantize a column tile at a time, then at::mm");
}
