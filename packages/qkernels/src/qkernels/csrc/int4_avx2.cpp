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
// dequant path (many rows): a tile of output columns is dequantized to float32 s * (q - z) (bit-identical to
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
      for (int v = 0; v < NV; ++v) words[v] = _mm256_loadu_si256((const __m256i*)(w + kb * N + n0 + 8 * v));
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

}  // namespace

// x [M, K] float32 contiguous; w [K/8, N] int32 (kn8); s, z [G, N] float32. Returns [M, N] float32.
torch::Tensor int4_kn8_gemv(torch::Tensor x, torch::Tensor w, torch::Tensor s, torch::Tensor z, int64_t group) {
  TORCH_CHECK(x.dtype() == torch::kFloat32 && x.is_contiguous() && x.dim() == 2, "x: float32 contiguous [M, K]");
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

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("int4_kn8_gemv", &int4_kn8_gemv, "AVX2 int4 kn8 matmul for few activation rows (see source comment)");
  m.def("int4_kn8_dequant_mm", &int4_kn8_dequant_mm, "int4 kn8: dequantize a column tile at a time, then at::mm");
}
