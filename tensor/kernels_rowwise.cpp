// gemm_nt_rowwise: Y = X·Wᵀ with every output summed in one order that depends on K alone.
//
// The order (the contract every block of a path keeps): y[i, j] = reduce(acc) + tail, where acc
// has W lanes, lane u holding Σ x[i, p + u]·w[j, p + u] over p = 0, W, 2W, ... (p + W <= K) in
// increasing p, one fused multiply-add each (plain multiply and add on the portable path);
// reduce(acc) = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7)) after adding lane u + 8 into
// lane u when W = 16; the tail adds x[i, p]·w[j, p] for the last K mod W columns in increasing
// p. Blocking several rows and outputs only changes which (i, j) are computed together, never
// how one is summed. The path (W = 16 with AVX-512, 8 with AVX2 + FMA, 8 portable) is chosen
// once per process from the CPU (or SEQTAPE_ROWWISE_PATH), so every call of a process sums the
// same way. weighted_rows (attention's context) lives here too, on the same paths.
//
// gemm_packed: Y = X·Wᵀ with W packed in strips of 32 outputs ([K][32] each, pack_strips), the
// decoder's weight matrices. Its order: y[i, j] is one chain over p = 0 .. K-1 in increasing p,
// one fused multiply-add each (plain multiply and add on the portable path), starting from 0;
// then + bias[j]; then the activation (ReLU as max(y, 0) in registers, which gives what
// x > 0 ? x : 0 gives, NaN and -0 included). The accumulators run along the outputs: a block
// keeps one vector per 16 (8) outputs of each of its rows and broadcasts X, so a block of R rows
// reuses every vector of W R times (dot products reuse nothing across rows). Blocks of 8 (AVX2:
// 6), 4, 2 or 1 rows, of whole strips or (AVX2, 6 and 4 rows) half strips, 1 to 4 strips at a
// time (a single row takes several, so that it has 8-12 independent chains) again change only
// which outputs are computed together.
//
// Threads: a call big enough (kSplitFlops) splits its outputs into chunks (of a multiple of 8
// outputs; gemm_packed: of whole strips) that the caller and persistent helper threads claim one
// at a time; an output is computed by
// exactly one thread with the block code above, so threads never change a bit; that thread also
// runs the call's epilogue (bias, activation) over the outputs it summed. The same helpers run
// parallel_chunks() for other row-independent work (the decoder's attention) and
// parallel_range() for the training step's non-BLAS ops (elementwise, LayerNorm, softmax,
// cross-entropy, Adam, the gradient norm): one thread budget, the BLAS thread count.
//
// Dimension key: M rows of X, N outputs (rows of W), K the shared inner dimension.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include "tensor/cpu_path.h"
#include "tensor/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define SEQTAPE_ROWWISE_X86 1
#define SEQTAPE_X86_TARGET(isa) __attribute__((target(isa)))
#define SEQTAPE_INLINE inline __attribute__((always_inline))
#endif

namespace seqtape::kernels {

namespace {

// Rows of X taken together: X rows of a panel stay in L2 while W streams past them once.
constexpr int64_t kPanelRows = 64;

// gemm_packed: outputs per strip (kernels.h), and strips a block of rows passes together.
constexpr int64_t kStrip = kPackStrip, kGroup = 4;

// Portable path: the same lane order, without FMA.
float dot_portable(int64_t k, const float* x, const float* w) {
  float a[8] = {};
  int64_t p = 0;
  for (; p + 8 <= k; p += 8)
    for (int u = 0; u < 8; ++u) a[u] += x[p + u] * w[p + u];
  float s = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
  for (; p < k; ++p) s += x[p] * w[p];
  return s;
}

void rowwise_portable(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                      int64_t ldw, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) y[i * ldy + j] = dot_portable(k, x + i * ldx, w + j * ldw);
}

// gemm_packed's order without FMA: y = (((x0·w0) + x1·w1) + ...) + bias, then ReLU.
void packed_portable(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* wp,
                     int64_t s0, int64_t s1, float* y, int64_t ldy, const float* bias, bool relu) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = s0 * kStrip; j < std::min(n, s1 * kStrip); ++j) {
      const float* ws = wp + (j / kStrip) * k * kStrip + j % kStrip;
      float a = 0.f;
      for (int64_t p = 0; p < k; ++p) a += x[i * ldx + p] * ws[p * kStrip];
      if (bias) a += bias[j];
      if (relu) a = a > 0.f ? a : 0.f;
      y[i * ldy + j] = a;
    }
}

// weighted_rows' order without FMA: each y[i, c] summed over t in increasing t.
void weighted_portable(int64_t m, int64_t j, int64_t d, const float* s, int64_t lds, const float* v,
                       int64_t ldv, float* y, int64_t ldy) {
  for (int64_t i = 0; i < m; ++i) {
    float* yi = y + i * ldy;
    for (int64_t c = 0; c < d; ++c) yi[c] = 0.f;
    for (int64_t t = 0; t < j; ++t) {
      const float a = s[i * lds + t];
      const float* vt = v + t * ldv;
      for (int64_t c = 0; c < d; ++c) yi[c] += a * vt[c];
    }
  }
}

#ifdef SEQTAPE_ROWWISE_X86

// The blocked kernel, written once (kernels_rowwise.inc) for two vector widths.
SEQTAPE_X86_TARGET("avx2,fma") inline float reduce8(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));  // (a0+a4)+(a2+a6), (a1+a5)+(a3+a7)
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
}

// The halves of p and q added: [lo(p) + hi(p) | lo(q) + hi(q)] (lanes u + u + 4 of each).
SEQTAPE_X86_TARGET("avx2,fma") SEQTAPE_INLINE __m256 add_halves(__m256 p, __m256 q) {
  return _mm256_add_ps(_mm256_permute2f128_ps(p, q, 0x20), _mm256_permute2f128_ps(p, q, 0x31));
}

// reduce8 of 8 registers at once, out[i] = reduce8(a[i]): the same adds, across registers.
SEQTAPE_X86_TARGET("avx2,fma") SEQTAPE_INLINE void reduce8x8(const __m256* a, float* out) {
  const __m256 h01 = add_halves(a[0], a[1]), h23 = add_halves(a[2], a[3]),
               h45 = add_halves(a[4], a[5]), h67 = add_halves(a[6], a[7]);
  // q0 = h0 + h2, q1 = h1 + h3: [q(a0), q(a2) | q(a1), q(a3)], [q(a4), q(a6) | q(a5), q(a7)]
  const __m256 g0 = _mm256_add_ps(_mm256_shuffle_ps(h01, h23, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(h01, h23, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m256 g1 = _mm256_add_ps(_mm256_shuffle_ps(h45, h67, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm256_shuffle_ps(h45, h67, _MM_SHUFFLE(3, 2, 3, 2)));
  // q0 + q1: [r0, r2, r4, r6 | r1, r3, r5, r7], then into order
  const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(g0, g1, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(g0, g1, _MM_SHUFFLE(3, 1, 3, 1)));
  _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

namespace avx2 {
#define SEQTAPE_RW_TARGET "avx2,fma"
#define SEQTAPE_RW_VEC __m256
#define SEQTAPE_RW_LANES 8
#define SEQTAPE_RW_ZERO() _mm256_setzero_ps()
#define SEQTAPE_RW_LOAD(p) _mm256_loadu_ps(p)
#define SEQTAPE_RW_STORE(p, v) _mm256_storeu_ps(p, v)
#define SEQTAPE_RW_SET1(f) _mm256_set1_ps(f)
#define SEQTAPE_RW_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SEQTAPE_RW_REDUCE(v) reduce8(v)
#define SEQTAPE_RW_REDUCE8X8(a, out) reduce8x8(a, out)
#define SEQTAPE_RW_ROWS 4
#define SEQTAPE_RW_COLS 3
#define SEQTAPE_RW_ADD(a, b) _mm256_add_ps(a, b)
#define SEQTAPE_RW_MAX(a, b) _mm256_max_ps(a, b)
#define SEQTAPE_RW_PACKED_ROWS 6
#define SEQTAPE_RW_PACKED_ACC 12
#define SEQTAPE_RW_PACKED_VECS 2
#define SEQTAPE_RW_PACKED_WHOLE 2
#include "tensor/kernels_rowwise.inc"
}  // namespace avx2

// 16 lanes: lanes u and u + 8 are added first, then the 8-lane reduction.
SEQTAPE_X86_TARGET("avx512f,avx2,fma") inline float reduce16(__m512 v) {
  alignas(64) float lanes[16];  // (GCC 12's 256-bit extract intrinsics warn in -Wuninitialized)
  _mm512_store_ps(lanes, v);
  return reduce8(_mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8)));
}

// All 16 lanes: the zero-masked forms of the shuffles (GCC 12's unmasked ones start from an
// undefined register, which -Wuninitialized reports).
constexpr __mmask16 kAll16 = 0xFFFF;

// Quarters 0 + 2 and 1 + 3 of p, then of q: [b(p) | b(q)], b = lanes u + u + 8.
SEQTAPE_X86_TARGET("avx512f,avx2,fma") SEQTAPE_INLINE __m512 fold16(__m512 p, __m512 q) {
  return _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll16, p, q, _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_maskz_shuffle_f32x4(kAll16, p, q, _MM_SHUFFLE(3, 2, 3, 2)));
}

// reduce16 of 8 registers at once, unordered: reduce16(a[L]) at float 4L, reduce16(a[L + 4]) at
// float 4L + 2 (L < 4).
SEQTAPE_X86_TARGET("avx512f,avx2,fma") SEQTAPE_INLINE __m512 reduce16x8_spread(const __m512* a) {
  const __m512 b01 = fold16(a[0], a[1]), b23 = fold16(a[2], a[3]), b45 = fold16(a[4], a[5]),
               b67 = fold16(a[6], a[7]);
  // h = b lanes u + u + 4, one 128-bit lane per register: [h(a0) | h(a1) | h(a2) | h(a3)], ...
  const __m512 h03 =
      _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll16, b01, b23, _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_maskz_shuffle_f32x4(kAll16, b01, b23, _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512 h47 =
      _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAll16, b45, b67, _MM_SHUFFLE(2, 0, 2, 0)),
                    _mm512_maskz_shuffle_f32x4(kAll16, b45, b67, _MM_SHUFFLE(3, 1, 3, 1)));
  // q0 = h0 + h2, q1 = h1 + h3: 128-bit lane L holds q(aL), q(aL+4)
  const __m512 q =
      _mm512_add_ps(_mm512_maskz_shuffle_ps(kAll16, h03, h47, _MM_SHUFFLE(1, 0, 1, 0)),
                    _mm512_maskz_shuffle_ps(kAll16, h03, h47, _MM_SHUFFLE(3, 2, 3, 2)));
  // q0 + q1: r(aL) at float 4L, r(aL+4) at 4L + 2
  const __m512 r = _mm512_add_ps(q, _mm512_maskz_shuffle_ps(kAll16, q, q, _MM_SHUFFLE(2, 3, 0, 1)));
  return r;
}

// reduce16 of 8 registers at once, out[i] = reduce16(a[i]): the same adds, across registers.
SEQTAPE_X86_TARGET("avx512f,avx2,fma") SEQTAPE_INLINE void reduce16x8(const __m512* a, float* out) {
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512 r = reduce16x8_spread(a);
  _mm512_mask_storeu_ps(out, 0x00FF, _mm512_maskz_permutexvar_ps(kAll16, order, r));  // 8 floats
}

// The same for two rows of 4 accumulators: y0[c] = reduce16(a[c]), y1[c] = reduce16(a[4 + c]).
SEQTAPE_X86_TARGET("avx512f,avx2,fma")
SEQTAPE_INLINE void reduce16x4x2(const __m512* a, float* y0, float* y1) {
  const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i second = _mm512_setr_epi32(2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512 r = reduce16x8_spread(a);
  _mm512_mask_storeu_ps(y0, 0x000F, _mm512_maskz_permutexvar_ps(kAll16, first, r));
  _mm512_mask_storeu_ps(y1, 0x000F, _mm512_maskz_permutexvar_ps(kAll16, second, r));
}

namespace avx512 {
#define SEQTAPE_RW_TARGET "avx512f,avx2,fma"
#define SEQTAPE_RW_VEC __m512
#define SEQTAPE_RW_LANES 16
#define SEQTAPE_RW_ZERO() _mm512_setzero_ps()
#define SEQTAPE_RW_LOAD(p) _mm512_loadu_ps(p)
#define SEQTAPE_RW_STORE(p, v) _mm512_storeu_ps(p, v)
#define SEQTAPE_RW_SET1(f) _mm512_set1_ps(f)
#define SEQTAPE_RW_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SEQTAPE_RW_REDUCE(v) reduce16(v)
#define SEQTAPE_RW_REDUCE8X8(a, out) reduce16x8(a, out)
#define SEQTAPE_RW_REDUCE4X2(a, y0, y1) reduce16x4x2(a, y0, y1)
#define SEQTAPE_RW_ROWS 4
#define SEQTAPE_RW_COLS 4
#define SEQTAPE_RW_ADD(a, b) _mm512_add_ps(a, b)
#define SEQTAPE_RW_MAX(a, b) _mm512_maskz_max_ps(kAll16, a, b)
#define SEQTAPE_RW_PACKED_ROWS 8
#define SEQTAPE_RW_PACKED_ACC 16
#define SEQTAPE_RW_PACKED_VECS 2
#define SEQTAPE_RW_PACKED_WHOLE 8
#include "tensor/kernels_rowwise.inc"
}  // namespace avx512

#endif  // SEQTAPE_ROWWISE_X86

// The path (cpu_path.h): 16 lanes (AVX-512), 8 (AVX2 + FMA) or portable.
void rowwise_serial(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                    int64_t ldw, float* y, int64_t ldy) {
  SEQTAPE_ON_PATH(rowwise, rowwise_portable, m, n, k, x, ldx, w, ldw, y, ldy);
}

void packed_serial(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* wp,
                   int64_t s0, int64_t s1, float* y, int64_t ldy, const float* bias, bool relu) {
  SEQTAPE_ON_PATH(packed, packed_portable, m, n, k, x, ldx, wp, s0, s1, y, ldy, bias, relu);
}

// Calls below this many FLOPs (2·M·N·K) stay on the calling thread: a one-row decoder step's
// matrices (0.13-0.5 MFLOP, a few µs) would spend more on waking a helper than they save.
constexpr double kSplitFlops = 1048576.0;  // 2^20

inline void cpu_relax() {
#ifdef SEQTAPE_ROWWISE_X86
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Helper threads for the big calls. One call at a time: a second caller meanwhile runs alone.
// The caller publishes a job as a ticket (generation, helpers taking part, chunk count, next
// chunk) and claims chunks itself; a helper claims only chunks of a ticket's own generation, so
// a late helper cannot take a chunk of a later job, and reads the job only after a successful
// claim, while the caller still waits for that chunk. After a job that asks them to linger,
// helpers poll (yielding) for kSpin after their last chunk (a decoder step's calls come tens of
// µs apart), then sleep until the next job; after one that does not (a training step's
// parallel_range while OpenBLAS runs the products: its BLAS calls in between want the cores),
// they sleep at once. Polling between the ops of such a step slowed it with other processes on
// the cores (docs/performance.md): the poller takes a share of a core from the BLAS call running
// meanwhile. (With oneDNN the products run on this pool too, and the helpers poll:
// kernels::idle_between_ops.)
class Pool {
 public:
  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true);
    }
    cv_.notify_all();
    for (std::thread& t : helpers_) t.join();
  }

  // Runs task(ctx, c) for every c < chunks on up to `threads` threads (this one included),
  // each chunk on one thread; false, with nothing run, when another call holds the pool.
  bool run(int threads, int64_t chunks, void (*task)(void*, int64_t), void* ctx, bool linger) {
    if (busy_.exchange(true, std::memory_order_acquire)) return false;
    linger_.store(linger, std::memory_order_relaxed);
    while (static_cast<int>(helpers_.size()) < threads - 1) {
      const int index = static_cast<int>(helpers_.size());
      helpers_.emplace_back([this, index] { helper_loop(index); });
    }
    job_ = {task, ctx};
    finished_.store(0, std::memory_order_relaxed);
    const uint64_t ticket = ++gen_ << 32 | uint64_t(threads - 1) << 24 | uint64_t(chunks) << 12;
    ticket_.store(ticket);  // (seq_cst with the load of sleeping_: see helper_loop)
    if (sleeping_.load() > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
    work(ticket >> 32);
    // The helpers' last chunks: pause a little, then yield, so that a helper preempted on a
    // busy machine can run here instead of waiting for its own core.
    for (int spin = 0; finished_.load(std::memory_order_acquire) < chunks; ++spin)
      if (spin < kPauses)
        cpu_relax();
      else
        std::this_thread::yield();
    busy_.store(false, std::memory_order_release);
    return true;
  }

  static constexpr int kMaxThreads = 64;       // helpers taking part fit 8 bits
  static constexpr int64_t kMaxChunks = 4095;  // chunks, 12

 private:
  struct Job {
    void (*task)(void*, int64_t);
    void* ctx;
  };
  static constexpr auto kSpin = std::chrono::microseconds(200);
  static constexpr int kPauses = 2000;  // about 10-50 µs of pauses before the caller yields

  // Claims and computes chunks of generation `gen` until none is left.
  void work(uint64_t gen) {
    uint64_t t = ticket_.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t next = t & 0xfff, chunks = t >> 12 & 0xfff;
      if (t >> 32 != gen || next >= chunks) return;
      if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
      const Job j = job_;  // gen's job: its caller waits for this chunk
      j.task(j.ctx, int64_t(next));
      finished_.fetch_add(1, std::memory_order_acq_rel);
      t = ticket_.load(std::memory_order_acquire);
    }
  }

  // Helper `index` takes part in the jobs that ask for more than `index` helpers.
  void helper_loop(int index) {
    uint64_t seen = ticket_.load() >> 32;
    while (!stop_.load(std::memory_order_relaxed)) {
      const auto idle = std::chrono::steady_clock::now();
      uint64_t t = ticket_.load(std::memory_order_acquire);
      const bool linger = linger_.load(std::memory_order_relaxed);
      for (int spin = 1; t >> 32 == seen && !stop_.load(std::memory_order_relaxed); ++spin) {
        if (!linger || (spin % 64 == 0 && std::chrono::steady_clock::now() - idle > kSpin)) {
          // Sleep. The caller stores the ticket, then reads sleeping_; this raises sleeping_,
          // then reads the ticket (both seq_cst): one of the two sees the other.
          std::unique_lock<std::mutex> lock(mu_);
          sleeping_.fetch_add(1);
          cv_.wait(lock, [&] { return stop_.load() || ticket_.load() >> 32 != seen; });
          sleeping_.fetch_sub(1);
        } else {
          std::this_thread::yield();  // (not a pause: on a busy machine the caller may need the
                                      // core)
        }
        t = ticket_.load(std::memory_order_acquire);
      }
      if (stop_.load(std::memory_order_relaxed)) return;
      seen = t >> 32;
      if (int64_t(t >> 24 & 0xff) > index) work(seen);
    }
  }

  std::atomic<bool> busy_{false}, stop_{false}, linger_{true};
  std::atomic<uint64_t> ticket_{0};  // generation << 32 | helpers << 24 | chunks << 12 | next
  std::atomic<int64_t> finished_{0};
  std::atomic<int> sleeping_{0};
  uint64_t gen_ = 0;  // the caller's (under busy_)
  Job job_{};
  std::vector<std::thread> helpers_;
  std::mutex mu_;
  std::condition_variable cv_;
};

std::atomic<int> g_threads{0};  // gemm_nt_rowwise_set_threads; 0: the BLAS thread count

Pool& pool() {
  static Pool p;
  return p;
}

// Outputs [o, o + cnt) of every row: the product, then the epilogue over them.
void rowwise_outputs(int64_t m, int64_t o, int64_t cnt, int64_t k, const float* x, int64_t ldx,
                     const float* w, int64_t ldw, float* y, int64_t ldy, const RowwiseEpilogue& e) {
  rowwise_serial(m, cnt, k, x, ldx, w + o * ldw, ldw, y + o, ldy);
  for (int64_t i = 0; i < m; ++i) {
    float* yi = y + i * ldy + o;
    if (e.bias) add_row_bias<float>(yi, e.bias + o, 1, cnt);
    if (e.activate) activate<float>(yi, yi, cnt, e.act);
  }
}

// A call of `flops` over `units` independent outputs (or strips of them): body(u0, u1) over all
// of them, or, when the call is big enough (kSplitFlops) and there are threads, over chunks of a
// multiple of `align` units, about four per thread, on the pool (each chunk wholly on one thread).
template <typename F>
void split_units(double flops, int64_t units, int64_t align, F&& body) {
  const int threads = gemm_nt_rowwise_threads();
  if (flops < kSplitFlops || threads < 2 || units < 2 * align) return body(int64_t(0), units);
  const int64_t per = std::max(align, (units / (4 * threads) + align - 1) / align * align);
  auto chunk = [&](int64_t c) { body(c * per, std::min(units, (c + 1) * per)); };
  parallel_for((units + per - 1) / per, chunk, Idle::Poll);
}

// Strips [s0, s1) of a gemm_packed call for every row: the product with the bias and ReLU in
// registers, then any other activation over the outputs summed.
void packed_strips(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* wp,
                   int64_t s0, int64_t s1, float* y, int64_t ldy, const RowwiseEpilogue& e) {
  const bool relu = e.activate && e.act == Act::Relu;
  packed_serial(m, n, k, x, ldx, wp, s0, s1, y, ldy, e.bias, relu);
  if (!e.activate || relu) return;
  const int64_t o = s0 * kStrip, cnt = std::min(n, s1 * kStrip) - o;
  for (int64_t i = 0; i < m; ++i) activate<float>(y + i * ldy + o, y + i * ldy + o, cnt, e.act);
}

}  // namespace

int64_t packed_size(int64_t n, int64_t k) {
  return (n + kStrip - 1) / kStrip * kStrip * k;
}

void pack_strips(int64_t n, int64_t k, const float* w, int64_t stride_n, int64_t stride_k,
                 float* out) {
  for (int64_t s = 0; s * kStrip < n; ++s)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t c = 0; c < kStrip; ++c) {
        const int64_t j = s * kStrip + c;
        out[(s * k + p) * kStrip + c] = j < n ? w[j * stride_n + p * stride_k] : 0.f;
      }
}

void gemm_packed(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* wp,
                 float* y, int64_t ldy, const RowwiseEpilogue& epilogue) {
  split_units(2.0 * double(m) * double(n) * double(k), (n + kStrip - 1) / kStrip, 1,
              [&](int64_t s0, int64_t s1) {
                packed_strips(m, n, k, x, ldx, wp, s0, s1, y, ldy, epilogue);
              });
}

void parallel_chunks(int64_t chunks, void (*task)(void*, int64_t), void* ctx, Idle idle) {
  const int threads = chunks > 1 ? gemm_nt_rowwise_threads() : 1;
  if (threads > 1 && chunks <= Pool::kMaxChunks &&
      pool().run(threads, chunks, task, ctx, idle == Idle::Poll))
    return;
  for (int64_t c = 0; c < chunks; ++c) task(ctx, c);
}

// parallel_range's split: work (items × cost per item, in ns on one core) below this stays on
// the calling thread. A sleeping helper takes 5-50 µs to wake, and the caller pays a futex wake
// (a few µs) whether or not it arrives in time, so an op must be worth well over that. Split
// alone, small elementwise passes lost under load, but whole training steps gained with this
// threshold over a larger one and over no split (docs/performance.md).
constexpr double kParallelWork = 16384.0;

int64_t parallel_range_chunks(int64_t n, double cost) {
  if (n < 2 || double(n) * cost < kParallelWork) return 1;
  const int threads = gemm_nt_rowwise_threads();
  // A few chunks per thread, so that a helper that starts late (asleep, or its core busy with
  // another process) leaves the caller little to wait for.
  return threads > 1 ? std::min<int64_t>(n, 4 * threads) : 1;
}

int gemm_nt_rowwise_threads() {
  const int set = g_threads.load(std::memory_order_relaxed);
  // (hardware_concurrency reads /sys on every call: once is enough)
  static const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(set > 0 ? set : blas_num_threads(), 1, std::min(hw, Pool::kMaxThreads));
}

void gemm_nt_rowwise_set_threads(int n) {
  g_threads.store(std::max(0, n), std::memory_order_relaxed);
}

void gemm_nt_rowwise(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                     int64_t ldw, float* y, int64_t ldy) {
  gemm_nt_rowwise(m, n, k, x, ldx, w, ldw, y, ldy, RowwiseEpilogue{});
}

void gemm_nt_rowwise(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                     int64_t ldw, float* y, int64_t ldy, const RowwiseEpilogue& epilogue) {
  split_units(2.0 * double(m) * double(n) * double(k), n, 8, [&](int64_t o0, int64_t o1) {
    rowwise_outputs(m, o0, o1 - o0, k, x, ldx, w, ldw, y, ldy, epilogue);
  });
}

void weighted_rows(int64_t m, int64_t j, int64_t d, const float* s, int64_t lds, const float* v,
                   int64_t ldv, float* y, int64_t ldy) {
  SEQTAPE_ON_PATH(weighted, weighted_portable, m, j, d, s, lds, v, ldv, y, ldy);
}

const char* gemm_nt_rowwise_path() {
  return cpu_path_name(cpu_path());
}

}  // namespace seqtape::kernels
