// qkernels AVX2 int4 linear (CPU). Built on first use by qkernels.cpu_build (torch cpp_extension).
//
// Weight packing ("block64"): for output row n and 64-input block b, eight int32 words w[0..7]; nibble j
// (bits 4j..4j+3) of word i holds the code of input k = 64*b + 8*j + i. Each nibble is turned into the
// float 1 + q/16 by placing it in the top mantissa bits (bits 19..22) of 1.0f, so no int->float
// conversion is needed; per group the kernel accumulates A = sum_k x_k * (1 + q_k/16) and the caller
// subtracts the zero term:  y = sum_g [16 s_g A_g - s_g (16 + z_g) X_g],  X_g = sum_{k in g} x_k.
// This file computes out[m, n] = sum_g 16 s[n, g] A[m, n, g]; the caller subtracts X @ (s (16 + z)).T.
#include <torch/extension.h>
#include <ATen/Parallel.h>
#include <immintrin.h>

#include <algorithm>
#include <vector>

namespace {

constexpr int kRows = 4;  // output rows per task (share activation loads)

inline __m256 decode(__m256i v, int j) {
  const __m256i mask = _mm256_set1_epi32(0x00780000);
  const __m256i one = _mm256_set1_epi32(0x3F800000);
  __m256i t;
  switch (j) {
    case 0: t = _mm256_slli_epi32(v, 19); break;
    case 1: t = _mm256_slli_epi32(v, 15); break;
    case 2: t = _mm256_slli_epi32(v, 11); break;
    case 3: t = _mm256_slli_epi32(v, 7); break;
    case 4: t = _mm256_slli_epi32(v, 3); break;
    case 5: t = _mm256_srli_epi32(v, 1); break;
    case 6: t = _mm256_srli_epi32(v, 5); break;
    default: t = _mm256_srli_epi32(v, 9); break;
  }
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(t, mask), one));
}

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

// Decode-as-you-go: best when few activation rows share the weight. Two accumulators per row (even and
// odd nibble positions) give eight independent FMA chains, enough to hide the FMA latency.
void rows_direct(const float* x, int64_t M, int64_t K, const int32_t* w, const float* s16, int64_t G,
                 int64_t halves_per_group, float* out, int64_t N, int64_t n0) {
  const int64_t blocks = K / 64;
  for (int64_t m = 0; m < M; ++m) {
    const float* xm = x + m * K;
    __m256 total[kRows], even[kRows], odd[kRows];
    for (int r = 0; r < kRows; ++r) {
      total[r] = _mm256_setzero_ps();
      even[r] = _mm256_setzero_ps();
      odd[r] = _mm256_setzero_ps();
    }
    int64_t half = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      __m256i v[kRows];
      for (int r = 0; r < kRows; ++r) v[r] = _mm256_loadu_si256((const __m256i*)(w + ((n0 + r) * blocks + b) * 8));
      for (int h = 0; h < 2; ++h, ++half) {
        for (int jj = 0; jj < 4; jj += 2) {
          const int j = h * 4 + jj;
          const __m256 x0 = _mm256_loadu_ps(xm + b * 64 + j * 8);
          const __m256 x1 = _mm256_loadu_ps(xm + b * 64 + j * 8 + 8);
          for (int r = 0; r < kRows; ++r) {
            even[r] = _mm256_fmadd_ps(x0, decode(v[r], j), even[r]);
            odd[r] = _mm256_fmadd_ps(x1, decode(v[r], j + 1), odd[r]);
          }
        }
        if ((half + 1) % halves_per_group == 0) {
          const int64_t g = half / halves_per_group;
          for (int r = 0; r < kRows; ++r) {
            const __m256 a = _mm256_add_ps(even[r], odd[r]);
            total[r] = _mm256_fmadd_ps(a, _mm256_set1_ps(s16[(n0 + r) * G + g]), total[r]);
            even[r] = _mm256_setzero_ps();
            odd[r] = _mm256_setzero_ps();
          }
        }
      }
    }
    if (half % halves_per_group != 0) {  // a partial last group
      for (int r = 0; r < kRows; ++r) {
        const __m256 a = _mm256_add_ps(even[r], odd[r]);
        total[r] = _mm256_fmadd_ps(a, _mm256_set1_ps(s16[(n0 + r) * G + G - 1]), total[r]);
      }
    }
    for (int r = 0; r < kRows; ++r) out[m * N + n0 + r] = hsum(total[r]);
  }
}

// Decode one group of `rows` output rows (a multiple of kRows) into a small buffer, then stream the
// activation rows over it two at a time (2 x kRows = 8 independent FMA chains, 6 loads per 8 FMAs). Wider
// tasks (16 rows) read the activations from memory a quarter as often; each group's 16 x group floats stay
// in L1 while every activation row passes over them.
void rows_buffered(const float* x, int64_t M, int64_t K, const int32_t* w, const float* s16, int64_t G,
                   int64_t group, float* out, int64_t N, int64_t n0, int64_t rows, float* buf, __m256* total) {
  const int64_t blocks = K / 64;
  for (int64_t i = 0; i < M * rows; ++i) total[i] = _mm256_setzero_ps();
  for (int64_t g = 0; g < G; ++g) {
    const int64_t k0 = g * group;
    const int64_t len = std::min(group, K - k0);  // the last group may be partial (a multiple of 32)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = k0; k < k0 + len; k += 32) {
        const int64_t b = k / 64;
        const int h = static_cast<int>((k % 64) / 32);
        const __m256i v = _mm256_loadu_si256((const __m256i*)(w + ((n0 + r) * blocks + b) * 8));
        for (int jj = 0; jj < 4; ++jj) _mm256_storeu_ps(buf + r * group + (k - k0) + jj * 8, decode(v, h * 4 + jj));
      }
    }
    int64_t m = 0;
    for (; m + 1 < M; m += 2) {
      const float* x0p = x + m * K + k0;
      const float* x1p = x0p + K;
      for (int64_t rb = 0; rb < rows; rb += kRows) {
        const float* bp = buf + rb * group;
        __m256 a0[kRows], a1[kRows];
        for (int r = 0; r < kRows; ++r) { a0[r] = _mm256_setzero_ps(); a1[r] = _mm256_setzero_ps(); }
        for (int64_t k = 0; k < len; k += 8) {
          const __m256 x0 = _mm256_loadu_ps(x0p + k);
          const __m256 x1 = _mm256_loadu_ps(x1p + k);
          for (int r = 0; r < kRows; ++r) {
            const __m256 wv = _mm256_loadu_ps(bp + r * group + k);
            a0[r] = _mm256_fmadd_ps(x0, wv, a0[r]);
            a1[r] = _mm256_fmadd_ps(x1, wv, a1[r]);
          }
        }
        for (int r = 0; r < kRows; ++r) {
          const __m256 sc = _mm256_set1_ps(s16[(n0 + rb + r) * G + g]);
          total[m * rows + rb + r] = _mm256_fmadd_ps(a0[r], sc, total[m * rows + rb + r]);
          total[(m + 1) * rows + rb + r] = _mm256_fmadd_ps(a1[r], sc, total[(m + 1) * rows + rb + r]);
        }
      }
    }
    for (; m < M; ++m) {
      const float* xm = x + m * K + k0;
      for (int64_t rb = 0; rb < rows; rb += kRows) {
        const float* bp = buf + rb * group;
        __m256 acc[kRows];
        for (int r = 0; r < kRows; ++r) acc[r] = _mm256_setzero_ps();
        for (int64_t k = 0; k < len; k += 8) {
          const __m256 xv = _mm256_loadu_ps(xm + k);
          for (int r = 0; r < kRows; ++r) acc[r] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(bp + r * group + k), acc[r]);
        }
        for (int r = 0; r < kRows; ++r) {
          const __m256 sc = _mm256_set1_ps(s16[(n0 + rb + r) * G + g]);
          total[m * rows + rb + r] = _mm256_fmadd_ps(acc[r], sc, total[m * rows + rb + r]);
        }
      }
    }
  }
  for (int64_t mm = 0; mm < M; ++mm)
    for (int64_t r = 0; r < rows; ++r) out[mm * N + n0 + r] = hsum(total[mm * rows + r]);
}

}  // namespace

// x [M, K] float32 contiguous; w [N, K/64, 8] int32 (block64); s16 [N, G] float32 = 16 * scale.
// Returns [M, N] float32 = sum_g 16 s A (see the file comment). K % 64 == 0, N % 4 == 0, group % 32 == 0;
// the last group may be partial.
torch::Tensor int4_block64_mm(torch::Tensor x, torch::Tensor w, torch::Tensor s16, int64_t group, int64_t buffered_from) {
  TORCH_CHECK(x.dtype() == torch::kFloat32 && x.is_contiguous() && x.dim() == 2, "x: float32 contiguous [M, K]");
  TORCH_CHECK(w.dtype() == torch::kInt32 && w.is_contiguous() && w.dim() == 3 && w.size(2) == 8, "w: int32 [N, K/64, 8]");
  TORCH_CHECK(s16.dtype() == torch::kFloat32 && s16.is_contiguous(), "s16: float32 [N, G]");
  const int64_t M = x.size(0), K = x.size(1), N = w.size(0), G = s16.size(1);
  TORCH_CHECK(K % 64 == 0 && w.size(1) * 64 == K, "K must be a multiple of 64 matching w");
  TORCH_CHECK(N % kRows == 0 && s16.size(0) == N, "N must be a multiple of 4 matching s16");
  TORCH_CHECK(group % 32 == 0 && G == (K + group - 1) / group, "group must be a multiple of 32 with G == ceil(K / group)");
  auto out = torch::empty({M, N}, x.options());
  const float* xp = x.data_ptr<float>();
  const int32_t* wp = w.data_ptr<int32_t>();
  const float* sp = s16.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const bool buffered = M >= buffered_from;
  const int64_t rows = buffered && N % (4 * kRows) == 0 ? 4 * kRows : kRows;
  const int64_t tasks = N / rows;
  at::parallel_for(0, tasks, buffered ? 2 : 8, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(buffered ? rows * group : 0);
    std::vector<__m256> total(buffered ? M * rows : 0);
    for (int64_t t = begin; t < end; ++t) {
      if (buffered)
        rows_buffered(xp, M, K, wp, sp, G, group, op, N, t * rows, rows, buf.data(), total.data());
      else
        rows_direct(xp, M, K, wp, sp, G, group / 32, op, N, t * kRows);
    }
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("int4_block64_mm", &int4_block64_mm, "AVX2 int4 block64 matmul (see source comment)");
}
