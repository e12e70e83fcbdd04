#pragma once
// The path of kernels::gemm<float>, gemm_bias<float> and gemm_batched<float> for small float
// products (kernels_small_gemm.cpp), on every matmul backend: each product of the batch (a
// single product is a batch of one) wholly on one thread of the pool (parallel_range), by a
// register-blocked kernel (AVX-512 or AVX2 + FMA when the CPU has them, chosen once per process;
// portable C++ otherwise; gemm_small_path() names it) instead of one BLAS call per product. Every
// output is one chain of K multiply-adds in increasing p, then alpha (and beta·C when beta != 0;
// beta = 0 does not read C), so neither the thread count nor the batch changes a bit.
//
// Dimension key: M, N, K gemm sizes.

#include <cstdint>

#include "tensor/kernels.h"

namespace seqtape::kernels {

// Whether gemm<float>, gemm_bias<float> and gemm_batched<float> send an M×N×K product here: a
// bound on M·N·K alone, so a product's bits never depend on how many others share its batch.
// SEQTAPE_SMALL_GEMM=0 in the environment turns the path off for the process (to measure it
// against BLAS and oneDNN).
bool gemm_small_takes(int64_t m, int64_t n, int64_t k);

// While one lives, gemm_small_takes is false for every shape, so that a test can run small
// products on the matmul backends themselves. Process-wide, like the matmul setting: not while
// another thread runs a product.
class SmallGemmOff {
 public:
  SmallGemmOff();
  ~SmallGemmOff();
  SmallGemmOff(const SmallGemmOff&) = delete;
  SmallGemmOff& operator=(const SmallGemmOff&) = delete;

 private:
  bool prev_;
};

// Whether they send an M×N×K product here under Precision::BF16 too (with round_bf16): a lower
// bound than gemm_small_takes', since oneDNN's bf16 product gains on larger ones.
bool gemm_small_takes_bf16(int64_t m, int64_t n, int64_t k);

// gemm_batched's contract (kernels.h), float only, any sizes. round_bf16: each product's
// operands are first rounded to bfloat16 (detail::round_rows_to_bf16, into this thread's dense
// copies), so the product is bf16 operands with float32 sums, as Precision::BF16 multiplies.
void gemm_small_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                        float* c, int64_t ldc, const GemmBatch& batch, bool round_bf16 = false);

// "avx512", "avx2" or "portable".
const char* gemm_small_path();

}  // namespace seqtape::kernels
