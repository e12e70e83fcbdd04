// A vectorized e^x for float (kernels_exp.cpp): softmax's, log-softmax's and the cross-entropy's
// rows of exps; and GELU's and SiLU's forward and backward for float, built on it (below).
//
// Each element: x clamped to [-104, 89] (beyond them e^x rounds to 0 or overflows to inf), then
// x = n·ln2 + r (Cody-Waite, ln2 in two float parts, n the integer nearest x·log2e) with
// |r| <= ln2/2 + a little, e^r by its degree-7 Taylor polynomial in Horner form, then
// e^x = (p·2^⌊n/2⌋)·2^(n−⌊n/2⌋) through the exponent bits (two steps, so that n from -150 to 128
// never builds an out-of-range power; the second multiply rounds the result once, denormals
// included). Every step is a fused multiply-add, a multiply or an add in the same order on every
// path (AVX-512, AVX2 + FMA, portable with std::fma), so the bits do not depend on the path, nor
// on the thread, nor on an element's neighbours. Max relative error about 1 ulp for normal
// results (tests/tensor/test_exp.cpp measures it); -inf gives +0, +inf gives +inf, NaN stays
// NaN. At or below -104 (where the steps above round to +0) every path gives +0 through a second
// scale of zero: the multiply that underflows costs a microcode assist, which made rows with
// masked scores (-inf, as under a causal mask) several times slower (docs/performance.md).
#pragma once

#include <cstdint>

namespace seqtape::kernels {

// y[i] = e^(x[i] − shift), the difference rounded to float first (as std::exp(x[i] - shift)
// would take it). In place is allowed (y == x).
void exp_shifted(const float* x, float shift, float* y, int64_t n);

// The path exp_shifted takes in this process: "avx512", "avx2" or "portable" (the CPU's widest,
// or a narrower one that SEQTAPE_ROWWISE_PATH asks for, as gemm_nt_rowwise's).
const char* exp_path();

// For the tests: exp_shifted on the named path; false, with nothing written, when this CPU (or
// this build) does not have it.
bool exp_shifted_on(const char* path, const float* x, float shift, float* y, int64_t n);

// GELU, x·Φ(x), for float. Φ(x) for x < 0 is ½·erfc(|x|/√2), and 1 minus that for x >= 0, with
// erfc(z) = t·P(t)·e^(−z²), t = 1/(1 + 0.5·z), P of degree 10 fitted for relative error (at most
// 4e-8 before rounding: scripts/fit_erfc.py prints the constants), and e^(−z²) = e^(−x²/2) by
// the e^x above. The derivative is Φ(x) + x·φ(x), φ(x) = e^(−x²/2)/√(2π) from the same e^x.
// Φ is within 2.5e-7 of the exact value everywhere (std::erf's float result added to 1: within
// about 6e-8), and below x = −4, where float's 1 + erf(x/√2) has lost most of Φ's digits, it
// keeps them: within 1e-5 relative down to −13 (tests/tensor/test_exp.cpp measures both). ±inf
// give a NaN derivative (∞·0), as the double op's formula does. Every step in the same order on
// every path, as exp_shifted's: the same bits on every path, thread and neighbour. The scalar
// std::erf loop it replaces made the G2P recipe's training step about 1.7 times as long as with
// ReLU (docs/performance.md).
//
// y[i] = gelu(x[i]). In place is allowed.
void gelu_forward(const float* x, float* y, int64_t n);
// dx[i] = g[i]·gelu'(x[i]), or dx[i] += that when accumulate.
void gelu_backward(const float* g, const float* x, float* dx, int64_t n, bool accumulate);

// SiLU (SwiGLU's gate), x·σ(x) = x/(1 + e^−x) with the e^x above, and its derivative
// σ(x)·(1 + x·(1 − σ(x))) (1 − σ as e^−x·σ for x >= 0): a few ulp (tests/tensor/test_exp.cpp
// measures it), the same bits on every path. As gelu_forward / gelu_backward.
void silu_forward(const float* x, float* y, int64_t n);
void silu_backward(const float* g, const float* x, float* dx, int64_t n, bool accumulate);

// For the tests: activation "gelu" or "silu", forward into y and backward into dx (written), on
// the named path; false, with nothing written, as exp_shifted_on.
bool activation_on(const char* path, const char* activation, const float* x, const float* g,
                   float* y, float* dx, int64_t n);

}  // namespace seqtape::kernels
