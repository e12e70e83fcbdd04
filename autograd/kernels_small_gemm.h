#pragma once
// gemm_batched<float>'s path for small products (kernels_small_gemm.cpp): each product of the
// batch wholly on one thread of the pool (parallel_range), by a register-blocked kernel (AVX-512
// or AVX2 + FMA when the CPU has them, chosen once per process; portable C++ otherwise;
// gemm_small_path() names it) instead of one BLAS call per product. Every output is one chain of
// K multiply-adds in increasing p, then alpha (and beta·C when beta != 0; beta = 0 does not read
// C), so neither the thread count nor the batch changes a bit.
//
// Dimension key: M, N, K gemm sizes.

#include <cstdint>

#include "autograd/kernels.h"

namespace seqtape::kernels {

// Whether gemm_batched<float> sends an M×N×K product here: a bound on M·N·K alone, so a
// product's bits never depend on how many others share its batch. SEQTAPE_SMALL_GEMM=0 in the
// environment turns the path off for the process (to measure it against BLAS and oneDNN).
bool gemm_small_takes(int64_t m, int64_t n, int64_t k);

// gemm_batched's contract (kernels.h), float only, any sizes.
void gemm_small_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                        const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                        float* c, int64_t ldc, const GemmBatch& batch);

// "avx512", "avx2" or "portable".
const char* gemm_small_path();

}  // namespace seqtape::kernels
