#pragma once
// Kernels: plain functions over contiguous row-major buffers. No tape, no Var, no shape
// checks beyond what the caller passes — the differentiable ops (ops.h) and the decoder
// (infer/) both call these, so training and inference run the same arithmetic.
//
// Dimension key: M, N, K gemm sizes; R rows; C columns (the last axis).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace seqtape::kernels {

// C[M,N] = alpha·op(A)·op(B) + beta·C, row-major, through CBLAS (sgemm / dgemm), or for float
// through oneDNN when tensor/matmul_backend.h says so. Gemms under
// 2^27 FLOPs run on one OpenBLAS thread (see kernels.cpp for the measurements); the switch sets
// OpenBLAS's process-wide thread count around the call, so gemm must not be called from two
// threads at once (nothing in seqtape does; a threaded server would need another way).
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// C[M,N] = A·op(B) + bias (bias[j] added to column j; bias may be null): a linear layer's
// forward; relu: then C = max(C, 0) (+0 for a negative or NaN sum, as activate's Relu). On
// oneDNN the bias and ReLU are applied in the product's own epilogue, saving passes over C;
// otherwise gemm, then one pass adding the bias and applying the ReLU. Both round the sum, then
// the sum plus the bias.
template <typename T>
void gemm_bias(bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
               int64_t ldb, const T* bias, T* c, int64_t ldc, bool relu = false);

// The same product over a batch with up to two axes, n0 × n1 products (batch × heads, say):
// product (i, j) reads A at a + i·sa0 + j·sa1 and B at b + i·sb0 + j·sb1 and writes C at
// c + i·sc0 + j·sc1. The C blocks must not overlap; a stride of 0 on A or B uses one matrix
// for the whole axis. OpenBLAS runs one gemm per product, oneDNN one batched primitive
// (tensor/matmul_backend.h).
struct GemmBatch {
  int64_t n0 = 1, n1 = 1;
  int64_t sa0 = 0, sa1 = 0, sb0 = 0, sb1 = 0, sc0 = 0, sc1 = 0;
};
template <typename T>
void gemm_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
                  int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc,
                  const GemmBatch& batch);

namespace detail {
// kernels::gemm<float> on OpenBLAS, whatever the backend setting.
void gemm_openblas(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc);
}  // namespace detail

// y[N] = alpha·x[K]·W[K,N] + beta·y (a row vector times a row-major matrix), CBLAS gemv.
template <typename T>
void vec_mat(int64_t k, int64_t n, T alpha, const T* x, const T* w, T beta, T* y);

// y[M] = alpha·A[M,K]·x[K] + beta·y (a row-major matrix with row stride lda times a column
// vector: one dot product per row), CBLAS gemv. The same product as vec_mat with W = Aᵀ, but it
// reads each output's weights as one contiguous row.
template <typename T>
void mat_vec(int64_t m, int64_t k, T alpha, const T* a, int64_t lda, const T* x, T beta, T* y);

// Y[M,N] = X[M,K]·Wᵀ with W row-major [N,K] (each output's weights one contiguous row), row
// strides ldx, ldw, ldy. Not BLAS: every Y[i,j] is summed in one fixed order that depends on K
// alone (kernels_rowwise.cpp states it), never on M or on the other rows, so a row gives the same
// bits alone (M = 1) as inside any batch. The decoder uses it for its [out, in] matrices: that is
// what makes a batched or continuously batched decode give exactly what each input gives alone.
// AVX-512 or AVX2 + FMA when the CPU has them (decided once per process), portable C++
// otherwise; gemm_nt_rowwise_path() names the one in use.
void gemm_nt_rowwise(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                     int64_t ldw, float* y, int64_t ldy);
// What a linear layer does to the product: y[i, j] += bias[j] (when bias is set), then y =
// act(y) (when `activate`): the very operations of add_row_bias and activate, done by the
// thread that summed the outputs, right after them (a split call runs them in parallel).
enum class Act { Relu, Gelu, Tanh, Silu };
struct RowwiseEpilogue {
  const float* bias = nullptr;
  bool activate = false;
  Act act = Act::Relu;
};
void gemm_nt_rowwise(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w,
                     int64_t ldw, float* y, int64_t ldy, const RowwiseEpilogue& epilogue);
const char* gemm_nt_rowwise_path();

// The decoder's weight matrices packed at load for gemm_packed: strips of kPackStrip outputs,
// strip s holding its outputs' weights [K][kPackStrip] (output s·kPackStrip + c, input p at
// (s·K + p)·kPackStrip + c); the last strip's missing outputs are zeros. packed_size(N, K)
// floats. pack_strips reads W's element (output j, input p) at w[j·stride_n + p·stride_k]: an
// [out, in] matrix has strides (K, 1), an [in, out] one (1, N).
constexpr int64_t kPackStrip = 32;
int64_t packed_size(int64_t n, int64_t k);
void pack_strips(int64_t n, int64_t k, const float* w, int64_t stride_n, int64_t stride_k,
                 float* out);
// Y[M, N] = X[M, K]·Wᵀ + bias, then the activation, with W packed by pack_strips. Like
// gemm_nt_rowwise, not BLAS and row-independent, in another order: every Y[i, j] is one chain
// over p = 0 .. K-1 in increasing p (a fused multiply-add each on the AVX2 and AVX-512 paths,
// multiply then add on the portable one), then + bias[j], then the activation; so a row gives
// the same bits alone (M = 1) as inside any batch, on any number of threads. The accumulators
// run along the outputs (one vector per 16 or 8 outputs, a row's X broadcast), so a block of 8
// rows (6 on AVX2) shares every load of W: faster than gemm_nt_rowwise's dot products at decoder
// shapes, for blocks of rows and for one row (docs/performance.md). Threads as gemm_nt_rowwise's.
void gemm_packed(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* wp,
                 float* y, int64_t ldy, const RowwiseEpilogue& epilogue = {});
// Y[M, D] = S·V with S [M, J] (row stride lds) and V [J, D] (row stride ldv): each output
// y[i, d] = Σ_j s[i, j]·v[j, d] in increasing j (fused multiply-adds on the AVX2 and AVX-512
// paths, multiply then add on the portable one), one row at a time, so a row's bits depend on
// J alone. The attention context of a few queries (the decoder's one per row), where a BLAS
// call spends more on packing than on the product.
void weighted_rows(int64_t m, int64_t j, int64_t d, const float* s, int64_t lds, const float* v,
                   int64_t ldv, float* y, int64_t ldy);
// Threads a big gemm_nt_rowwise call (2·M·N·K >= 2^20) splits its outputs over: n > 0 sets it,
// 0 (the default) follows the BLAS thread count (blas_num_threads(), OPENBLAS_NUM_THREADS),
// capped at the hardware's. An output is summed by one thread in the order above, so the count
// never changes a result.
void gemm_nt_rowwise_set_threads(int n);
int gemm_nt_rowwise_threads();

// task(ctx, c) for every c in [0, chunks), on the threads gemm_nt_rowwise uses (this one among
// them; gemm_nt_rowwise_threads()), each chunk wholly on one thread; returns when all are done.
// Serial when one thread is set or another call is running on them. Tasks must not depend on
// which thread runs them or in what order (a chunk may itself call gemm_nt_rowwise: that call
// then runs on its own thread). After the call the helper threads poll for the next one for a
// while (Idle::Poll: calls tens of µs apart, like a decoder step's) or sleep at once
// (Idle::Sleep: work between OpenBLAS calls, which want the cores; idle_between_ops below).
enum class Idle { Poll, Sleep };
void parallel_chunks(int64_t chunks, void (*task)(void*, int64_t), void* ctx,
                     Idle idle = Idle::Poll);
template <typename F>
void parallel_for(int64_t chunks, F& f, Idle idle = Idle::Poll) {
  parallel_chunks(
      chunks, [](void* p, int64_t c) { (*static_cast<F*>(p))(c); }, &f, idle);
}

// How the pool's helpers wait after the calls of a training step (parallel_range, and a oneDNN
// product split over the pool): Poll while every float product runs on the pool too (matmul
// backend onednn, or bf16), so that the next op's chunks are taken at once (a faster step:
// docs/performance.md); Sleep while OpenBLAS's own threads run products (openblas, auto), which
// want the cores (matmul_backend.cpp).
Idle idle_between_ops();

// f(begin, end) over [0, n), split into ranges on the pool's threads (parallel_for) when the
// work, n·cost, is big enough to pay for the split (kernels_rowwise.cpp: kParallelWork, in units
// of about one vectorized float operation); otherwise f(0, n) on this thread. For per-item work
// only: an item's result must not depend on the range it falls in. (A reduction over items is
// split another way: by columns, each column summed over all rows in order, or into fixed blocks
// whose partial sums are combined in order afterwards, so that the bits never depend on the
// thread count.)
int64_t parallel_range_chunks(int64_t n, double cost);
// Rough costs per element for parallel_range, in ns on one core of the machine measured
// (kernels_rowwise.cpp): a streaming load, add or multiply and store; a transcendental (exp,
// erf, tanh, or a sqrt and a division).
inline constexpr double kCostSimple = 0.25;
inline constexpr double kCostTranscendental = 4.0;
template <typename F>
void parallel_range(int64_t n, double cost, F&& f) {
  const int64_t chunks = parallel_range_chunks(n, cost);
  if (chunks <= 1) {
    if (n > 0) f(int64_t{0}, n);
    return;
  }
  auto task = [&f, n, chunks](int64_t c) { f(n * c / chunks, n * (c + 1) / chunks); };
  parallel_for(chunks, task, idle_between_ops());
}

// d[j] += Σ_i f(i, j) over rows i < R in increasing i, for each column j < C: split by blocks of
// 64 columns over the pool, so each column is summed in the same order on any number of
// threads. cost is per element (as parallel_range's). The running sums of a block live in a
// local array while the rows pass (d may alias what f reads, as far as the compiler knows, so
// summing in d itself would store and reload every element instead of vectorizing across
// columns); a block of exactly 64 has a constant trip count, which the compiler keeps in
// registers (faster than a variable-length block, and splitting in whole blocks faster than in
// ranges of columns: docs/performance.md).
// They start from d[j] and add the same terms in the same order, so the bits are those of
// d[j] += ….
template <typename T, typename F>
void add_column_sums(T* d, int64_t rows, int64_t cols, double cost, F&& f) {
  constexpr int64_t kBlock = 64;
  const int64_t units = (cols + kBlock - 1) / kBlock;
  parallel_range(units, double(rows) * double(kBlock) * cost, [&](int64_t u0, int64_t u1) {
    T acc[kBlock];
    auto block = [&](int64_t b, auto n) {
      for (int64_t u = 0; u < n; ++u) acc[u] = d[b + u];
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t u = 0; u < n; ++u) acc[u] += f(i, b + u);
      for (int64_t u = 0; u < n; ++u) d[b + u] = acc[u];
    };
    const int64_t j1 = std::min(cols, u1 * kBlock);
    int64_t b = u0 * kBlock;
    for (; b + kBlock <= j1; b += kBlock) block(b, std::integral_constant<int64_t, kBlock>{});
    if (b < j1) block(b, j1 - b);
  });
}

// Per row of C: y = softmax(x) with max subtraction; a row that is entirely -inf gives
// zeros. In place is allowed (y == x).
template <typename T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols);
template <typename T>
void log_softmax_rows(const T* x, T* y, int64_t rows, int64_t cols);

// Σ f(c) for c < n with 8 independent partial sums: one running sum is a chain of dependent
// adds (4 cycles each) that the compiler may not reorder without -ffast-math; eight chains
// vectorize. Deterministic: the same order on every call.
template <typename T, typename F>
T row_sum(int64_t n, F&& f) {
  T acc[8] = {};
  int64_t c = 0;
  for (; c + 8 <= n; c += 8)
    for (int u = 0; u < 8; ++u) acc[u] += f(c + u);
  T tail = 0;
  for (; c < n; ++c) tail += f(c);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// A pass over rows that also sums per-column terms over the rows, so that rows both read are
// loaded once: row(i, part) does row i's own work and adds its terms into part[k·cols + j] for
// each sum k < S. Rows go in fixed blocks of kSumRows (split over the pool by blocks); each block
// sums its rows in increasing i from zero, and then d[k][j] += the blocks' sums in block order
// (d[k] null: sum k is not wanted). The grid of blocks is fixed, so the bits never depend on the
// thread count. cost is per row (as parallel_range's per item). The blocks' sums live in a
// buffer of this thread's, kept between calls (no allocation once it has grown).
inline constexpr int64_t kSumRows = 16;
template <typename T>
T* column_sum_scratch(int64_t n) {
  static thread_local std::vector<T> buf;
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
  return buf.data();
}
template <int S, typename T, typename RowFn>
void rows_with_column_sums(int64_t rows, int64_t cols, double cost, T* const (&d)[S], RowFn&& row) {
  const int64_t blocks = (rows + kSumRows - 1) / kSumRows;
  T* part = column_sum_scratch<T>(blocks * S * cols);
  parallel_range(blocks, double(kSumRows) * cost, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      T* p = part + b * S * cols;
      std::fill(p, p + S * cols, T(0));
      for (int64_t i = b * kSumRows; i < std::min(rows, (b + 1) * kSumRows); ++i) row(i, p);
    }
  });
  parallel_range(cols, double(blocks * S) * kCostSimple, [&](int64_t j0, int64_t j1) {
    for (int k = 0; k < S; ++k) {
      if (!d[k]) continue;
      for (int64_t b = 0; b < blocks; ++b) {
        const T* p = part + (b * S + k) * cols;
        for (int64_t j = j0; j < j1; ++j) d[k][j] += p[j];
      }
    }
  });
}

// Per row: y = (x - mean)·rstd·gamma + beta. mean/rstd may be null (inference).
template <typename T>
void layer_norm_rows(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                     int64_t rows, int64_t cols, double eps);
// The same over sum = a + b, written to `sum` row by row just before its row is normalized
// (one pass over a and b; the bits of an add, then layer_norm_rows).
template <typename T>
void add_layer_norm_rows(const T* a, const T* b, T* sum, const T* gamma, const T* beta, T* y,
                         T* mean, T* rstd, int64_t rows, int64_t cols, double eps);

// Per row: y = x·rstd·gamma with rstd = 1/sqrt(mean(x²) + eps): RMSNorm (T5, LLaMA), no mean
// subtracted and no bias. rstd may be null (inference).
template <typename T>
void rms_norm_rows(const T* x, const T* gamma, T* y, T* rstd, int64_t rows, int64_t cols,
                   double eps) {
  parallel_range(rows, double(cols) * 3 * kCostSimple, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * cols;
      T* yr = y + r * cols;
      const T ms =
          row_sum<T>(cols, [xr](int64_t c) { return xr[c] * xr[c]; }) / static_cast<T>(cols);
      const T rs = T(1) / std::sqrt(ms + static_cast<T>(eps));
      for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] * rs * gamma[c];
      if (rstd) rstd[r] = rs;
    }
  });
}

// y[r, :] += b[:] for each row.
template <typename T>
void add_row_bias(T* y, const T* b, int64_t rows, int64_t cols);

// Σ x² in double, accumulated in T over blocks of 256 (in 16 interleaved sums, vectorized) and in
// double across them in order (the blocks are computed on the pool's threads, their sums added
// in order after).
template <typename T>
double sum_squares(const T* x, int64_t n);

template <typename T>
void activate(const T* x, T* y, int64_t n, Act act);

// OpenBLAS introspection for benchmarks and the CLI.
std::string blas_core_name();
int blas_num_threads();
void blas_set_num_threads(int n);
// True when the CPU has AVX2/AVX-512 but OpenBLAS picked a generic kernel (e.g. Prescott).
bool blas_core_is_generic_on_modern_cpu();

}  // namespace seqtape::kernels
