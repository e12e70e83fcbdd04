#pragma once
// The dot products of infer/quant.h on the widest units this CPU has, chosen once per process
// (kernels::cpu_path() caps the choice, so SEQTAPE_ISA=avx2 or =portable, or
// ONEDNN_MAX_CPU_ISA=AVX2, runs the narrower paths on one machine):
//   int8: AVX-512 VNNI (vpdpbusd: unsigned × signed bytes, so the input is shifted by +128 and
//     128·Σ q_j taken off again), else AVX2 (vpmaddubsw on |q_x| and q_j carrying q_x's sign,
//     then vpmaddwd: no pair of products can saturate 16 bits with |q| <= 127), else portable.
//     Every path gives the same exact int32 sums.
//   bf16: AVX-512 BF16 (vdpbf16ps), else portable (float32 products in increasing p).
//
// Both take outputs [j0, j1) of the matrix, j0 a multiple of kQuantStrip, j1 one too or Out.
//
// Dimension key: N rows, Ld the padded row length.

#include <cstdint>

#include "infer/quant.h"

namespace seqtape::quant_kernels {

bool cpu_has_vnni();  // AVX-512 VNNI (and AVX-512 BW)
bool cpu_has_bf16();  // AVX-512 BF16
enum class Int8Path { Portable, Avx2, Vnni };
Int8Path int8_path();
bool bf16_native();  // the vdpbf16ps path is taken

// y[r·ldy + j] = float(Σ_p xq[r·Ld + p]·q_j[p]) / (sx[r]·w.scale[j]), j in [j0, j1).
void int8_rows(int64_t n, const int8_t* xq, const float* sx, const QuantMatrix& w, int64_t j0,
               int64_t j1, float* y, int64_t ldy);
// y[r·ldy + j] = Σ_p xb[r·Ld + p]·W_j[p] (bfloat16 values), j in [j0, j1).
void bf16_rows(int64_t n, const uint16_t* xb, const QuantMatrix& w, int64_t j0, int64_t j1,
               float* y, int64_t ldy);

}  // namespace seqtape::quant_kernels
