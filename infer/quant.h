#pragma once
// Quantized decoding weights (--compute-type): int8 with a scale per output row, or bf16. The
// embedding and every linear layer's matrix are stored so; attention, softmax, layer norms, the
// biases and the KV cache stay float32. See docs/quantization.md.
//
// int8 (CTranslate2's scheme): output row j of W keeps q_j = round(W_j·s_j) with
// s_j = 127 / max|W_j| (1 for a row of zeros), so |q| <= 127. Each input row x is quantized the
// same way on the fly (q_x, s_x); the dot products sum exactly in int32, and
// y_j = float(Σ q_x·q_j) / (s_x·s_j). The sums are exact integers, so a row gives the same bits
// alone and in any batch, on every path.
// bf16: W rounded to bfloat16 (to nearest even), each input row too; the products of pairs sum
// in float32 in a fixed order per output (vdpbf16ps), so rows are again batch-independent.
//
// Dimension key: N rows of x, In inputs, Out outputs, Ld In rounded up to kQuantPad.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/kernels.h"  // RowwiseEpilogue

namespace seqtape {

enum class ComputeType { F32, Bf16, Int8, Auto };
const char* to_string(ComputeType t);  // "f32", "bf16", "int8", "auto"
// "f32", "bf16", "int8" or "auto"; nullopt for anything else.
std::optional<ComputeType> parse_compute_type(std::string_view s);

// What this CPU lacks to run type t at speed ("" when nothing): int8 wants AVX2 (VNNI is
// faster), bf16 AVX-512 BF16.
std::string compute_type_missing(ComputeType t);
// The type `requested` runs as here: auto takes int8 where the CPU has AVX-512 VNNI, else f32
// (docs/quantization.md gives the rule's measured quality bound); the others as they are.
// int8 or bf16 on a CPU that lacks their units is an Error naming what is missing.
ComputeType resolve_compute_type(ComputeType requested);
// The kernel type t runs on here: "avx512_vnni", "avx2", "avx512_bf16", "portable", "f32".
const char* compute_kernel_name(ComputeType t);

// Row padding: every stored row holds Ld = In rounded up to this many values (zeros after In).
inline constexpr int64_t kQuantPad = 64;
// Outputs are stored in strips of this many (the last padded with zero rows), each strip as
// groups of 4 bytes per output: int8 [Ld / 4][16 outputs][4 inputs], bf16 [Ld / 2][16][2]. One
// group of a strip is one AVX-512 register, multiplied by one input row's 4 bytes broadcast: the
// accumulators run along the outputs, so no output needs a horizontal sum.
inline constexpr int64_t kQuantStrip = 16;
// int32 sums stay exact up to this many inputs (the VNNI path's terms reach 255·127).
inline constexpr int64_t kQuantMaxIn = 65536;

// One matrix of Out outputs by In inputs, in strips (kQuantStrip). Out16: Out rounded up to 16.
struct QuantMatrix {
  ComputeType type = ComputeType::Int8;  // Int8 or Bf16
  int64_t out = 0, in = 0, ld = 0, out16 = 0;
  std::vector<int8_t> q;       // int8: [Out16 / 16][Ld / 4][16][4]
  std::vector<float> scale;    // int8: s_j [Out16] (1 past Out)
  std::vector<int32_t> sum;    // int8: Σ_p q_j[p] [Out16] (the VNNI path's +128 correction)
  std::vector<uint16_t> bf16;  // bf16: [Out16 / 16][Ld / 2][16][2], the bfloat16 bits
  size_t bytes() const;        // the weights, scales and sums held
  // Where (output j, input p) is stored in q (group 4) or bf16 (group 2).
  static int64_t at(int64_t j, int64_t p, int64_t ld, int64_t group) {
    return ((j / kQuantStrip) * (ld / group) + p / group) * kQuantStrip * group +
           (j % kQuantStrip) * group + p % group;
  }
  int8_t q_at(int64_t j, int64_t p) const { return q[size_t(at(j, p, ld, 4))]; }
  uint16_t bf16_at(int64_t j, int64_t p) const { return bf16[size_t(at(j, p, ld, 2))]; }
  void dequantize_row(int64_t j, float* y) const;  // y [In] = W_j as stored
};
using QuantWeight = std::shared_ptr<const QuantMatrix>;

// W's element (output j, input p) at w[j·stride_out + p·stride_in], quantized as type t.
QuantMatrix quantize(ComputeType t, const float* w, int64_t out, int64_t in, int64_t stride_out,
                     int64_t stride_in);
// A stored int8 matrix (an export), element (output j, input p) at q[j·stride_out + p·stride_in],
// and its scales [Out]; the caller checks the scales (finite, > 0) and the values (not -128).
QuantMatrix int8_matrix(const int8_t* q, const float* scale, int64_t out, int64_t in,
                        int64_t stride_out, int64_t stride_in);
// A stored bf16 matrix (an export), its bits laid out as int8_matrix's values.
QuantMatrix bf16_matrix(const uint16_t* bits, int64_t out, int64_t in, int64_t stride_out,
                        int64_t stride_in);

// bfloat16 of x rounded to nearest even (NaN kept a NaN), and back.
uint16_t to_bf16(float x);
float from_bf16(uint16_t b);
// q [Ld] (zeros past In) and its scale s = 127 / max|x| (1 when x is all zeros).
float quantize_row(const float* x, int64_t in, int64_t ld, int8_t* q);

// y [N, Out] = x [N, In]·Wᵀ, then the epilogue's bias and activation. Each output of a row is
// summed by one thread, in an order that depends on In alone.
void quant_linear(const QuantMatrix& w, const float* x, int64_t N, float* y,
                  const kernels::RowwiseEpilogue& e = {});

}  // namespace seqtape
