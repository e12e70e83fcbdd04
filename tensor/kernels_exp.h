// A vectorized e^x for float (kernels_exp.cpp): softmax's, log-softmax's and the cross-entropy's
// rows of exps.
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

}  // namespace seqtape::kernels
