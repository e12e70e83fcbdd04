#pragma once
// The matmul backend layer: which library runs kernels::gemm<float>, and in which precision.
//
// OpenBLAS is the default and the only float64 path (gradchecks stay float64 OpenBLAS). oneDNN
// (Debian libdnnl-dev; optional at build time, SEQTAPE_HAVE_ONEDNN) can run the float32
// products behind the same matmul op:
//   openblas  every float gemm through cblas_sgemm (the default; what every result was
//             verified against)
//   onednn    every float gemm through a oneDNN matmul primitive, made once per shape and
//             reused; operands are described with their strides (op(A) and op(B) are read in
//             place, never copied). A product of 2^23 FLOPs or more is split into one part per
//             thread of the BLAS thread budget, each a one-thread oneDNN product on one of
//             seqtape's own threads (matmul_backend.cpp, run_onednn); its bits depend on the
//             thread setting, not on the load.
//   auto      per shape, whichever of the two was faster when the shape was first seen (timed
//             once per process and cached). Timing decides, so two processes may choose
//             differently and their results may differ in the last bits: auto runs are not
//             bit-reproducible across processes (openblas and onednn each are).
// Precision bf16 (mixed precision) rounds both operands of every float gemm to bfloat16
// (round to nearest even) and multiplies them on the CPU's bf16 units through oneDNN (the only
// bf16 gemm here, so bf16 runs on oneDNN whatever the backend says), with
// float32 accumulation and a float32 result. The exception: products small enough that
// oneDNN's call costs more than the product (attention's heads at the small and short models'
// sizes, gemm_small_takes_bf16) run on gemm_small_batched, their operands rounded the same way
// first, with float32 multiply-adds: bf16 operands and float32 sums as on oneDNN
// (whose bits differ from these in the order of the sums). Everything else stays float32: the
// weights the optimizer updates, its moments, softmax, LayerNorm, the loss, and checkpoints.
//
// On every backend, float32 products up to gemm_small_takes' bound (64^3 multiply-adds) run on
// gemm_small_batched too (kernels_small_gemm.h), whether batched or not.
//
// The setting is process-wide and applies to kernels::gemm<float> only; the decoder's own
// kernels (gemm_nt_rowwise, gemv) never change. Like gemm, it must not be changed while another
// thread runs a gemm.

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/tensor.h"

namespace seqtape::kernels {

enum class MatmulBackend { OpenBLAS, OneDNN, Auto };
enum class Precision { F32, BF16 };

const char* matmul_backend_name(MatmulBackend b);  // "openblas", "onednn", "auto"
const char* precision_name(Precision p);           // "f32", "bf16"
// Parse the CLI spellings; an Error listing the choices otherwise.
MatmulBackend parse_matmul_backend(const std::string& s);
Precision parse_precision(const std::string& s);

// What oneDNN offers on this build and CPU.
struct OneDnnInfo {
  bool built = false;   // seqtape was built with oneDNN
  std::string version;  // "2.6.3"
  std::string isa;      // the ISA oneDNN dispatches to on this CPU, e.g. "avx512_core_bf16"
  bool bf16 = false;    // the CPU has bfloat16 arithmetic (AVX-512 BF16 or AMX)
  bool amx = false;     // ... and AMX tile units
};
const OneDnnInfo& onednn_info();

// "" when the combination can run here; otherwise why not, in a sentence naming what oneDNN
// reports (no oneDNN in this build; no bf16 units on this CPU).
std::string matmul_problem(MatmulBackend b, Precision p);

// Sets the process-wide backend and precision. Throws Error (with matmul_problem's text) for a
// combination that cannot run here; callers that want a fallback ask matmul_problem first.
void set_matmul(MatmulBackend b, Precision p);
MatmulBackend matmul_backend();
Precision matmul_precision();

// Sets the backend and precision for its lifetime, then restores the previous ones.
class MatmulScope {
 public:
  MatmulScope(MatmulBackend b, Precision p);
  ~MatmulScope();
  MatmulScope(const MatmulScope&) = delete;
  MatmulScope& operator=(const MatmulScope&) = delete;

 private:
  MatmulBackend prev_b_;
  Precision prev_p_;
};

// Float gemms run since the process started, by route, oneDNN primitives made (each shape
// once), and oneDNN products split over seqtape's threads; for benchmarks and tests.
// bf16_values: the float values rounded to bfloat16 for oneDNN's products.
struct MatmulCounts {
  int64_t openblas = 0, onednn_f32 = 0, onednn_bf16 = 0, primitives = 0, split = 0, bf16_values = 0;
};
MatmulCounts matmul_counts();

// bf16 roundings kept for several products. Under Precision::BF16 each operand of a oneDNN
// product is rounded to bfloat16 first, and an op's products read the same stored matrices more
// than once: an affine's forward reads X and W, its backward reads W, X and dY, dY twice. While a
// Bf16MemoScope holds memos on this thread, each float operand of a single (non-batched) oneDNN
// product is looked up in them by its storage (pointer, rows, columns, row stride): found, the
// product takes that rounding; not found, it is rounded whole into the innermost memo, for the
// products after it. The bits are the same as without a memo (the same values rounded the same
// way, laid out as the products had them). The caller promises that the matrices a memo holds do
// not change while it holds them: an op keeps its forward's memo (its inputs) until its
// backward has run, and its backward's own (the output's gradient) only during it.
class Bf16Memo {
 public:
  // The rounding of src [rows, cols] (row stride ld), or null.
  const uint16_t* find(const float* src, int64_t rows, int64_t cols, int64_t ld) const;
  // Rounds src [rows, cols] (row stride ld) into a new entry, over the BLAS threads.
  const uint16_t* add(const float* src, int64_t rows, int64_t cols, int64_t ld);

 private:
  struct Entry {
    const float* src;
    int64_t rows, cols, ld;
    Tensor storage;  // the bf16 values [rows, cols], dense, in a pooled buffer
  };
  std::vector<Entry> entries_;
};

// Puts `memo` (null: nothing) innermost among this thread's memos for its lifetime; the
// products look a rounding up in all of them and keep a new one in the innermost.
class Bf16MemoScope {
 public:
  explicit Bf16MemoScope(Bf16Memo* memo);
  ~Bf16MemoScope();
  Bf16MemoScope(const Bf16MemoScope&) = delete;
  Bf16MemoScope& operator=(const Bf16MemoScope&) = delete;

 private:
  bool pushed_;
};

// The implementation oneDNN chose for a float (bf16 = false) or bf16 product of this shape,
// as it names it ("brg:avx512_core_bf16", "gemm:jit", ...); "" without oneDNN.
std::string onednn_impl_name(int64_t m, int64_t n, int64_t k, bool bf16);

// x rounded to bfloat16 (nearest even; NaN stays NaN) and widened back to float: what the bf16
// path multiplies.
float round_to_bf16(float x);

namespace detail {
// kernels::gemm<float>, gemm_bias<float> and gemm_batched<float> call this first; true when it
// ran the product (oneDNN; with a bias, alpha 1 and beta 0 only, C = op(A)·op(B) + bias per
// column; relu: then max(C, 0) in the same epilogue, as kernels::activate's Relu), false when
// OpenBLAS should (the setting, or auto's choice for this shape).
bool gemm_f32_routed(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                     int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
                     const GemmBatch& batch, const float* bias = nullptr, bool relu = false);
// Counts an OpenBLAS float gemm.
void count_openblas_gemm();
// x [rows, cols] (row stride ld) rounded to bfloat16 and widened back into y [rows, cols]
// (dense): round_to_bf16 of every value, by the CPU's conversion where the build has oneDNN.
// For the bf16 products that run on gemm_small_batched (small enough that oneDNN's call costs
// more than the product); called only under Precision::BF16, that is on CPUs with bf16 units.
void round_rows_to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ld, float* y);
}  // namespace detail

}  // namespace seqtape::kernels
