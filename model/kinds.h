#pragma once
// The norm kinds and feed-forward activations a model can choose, as tables: one row per kind
// with its name (JSON, flag), the parameters it owns and its float32 kernel, which is the
// tape-free forward infer/ runs. The code around them reads only the rows' columns, so a new
// kind is a value of its enum and a row here, plus its forward on the tape (nn/layers.cpp's
// tables, which the compiler checks against these) and its kernel and op below that.
//
// Dimension key: N rows, C d_model, F d_ff.

#include <cstdint>
#include <iterator>

#include "tensor/kernels.h"
#include "tensor/tensor.h"  // fail

namespace seqtape {

// LayerNorm: (x − mean)/sqrt(var + eps)·γ + β. RmsNorm (T5, LLaMA): x/sqrt(mean(x²) + eps)·γ, no
// mean and no β. Placed where NormPlacement says.
enum class NormKind { LayerNorm, RmsNorm };

// y [N, C] = the norm of each row of x [N, C] with γ [C] (and β [C] when the kind has one; null
// otherwise), in float32; y may be x.
using NormRowsF32 = void (*)(const float* x, const float* gamma, const float* beta, float* y,
                             int64_t N, int64_t C, double eps);

struct NormKindRow {
  NormKind id;
  const char* name;  // "norm_kind" in JSON, --norm-kind
  bool beta;         // owns β [C] beside γ [C]
  NormRowsF32 rows;  // the decoder's forward
};

inline constexpr NormKindRow kNormKinds[] = {
    {NormKind::LayerNorm, "layernorm", true,
     [](const float* x, const float* g, const float* b, float* y, int64_t N, int64_t C,
        double eps) { kernels::layer_norm_rows<float>(x, g, b, y, nullptr, nullptr, N, C, eps); }},
    {NormKind::RmsNorm, "rmsnorm", false,
     [](const float* x, const float* g, const float*, float* y, int64_t N, int64_t C, double eps) {
       kernels::rms_norm_rows<float>(x, g, y, nullptr, N, C, eps);
     }},
};

// The feed-forward is act(x·W1 + b1)·W2 + b2, or for a gated activation (a GLU: SwiGLU of LLaMA
// is silu's) (act(x·W1 + b1) ⊙ (x·W3 + b3))·W2 + b2 with W3 [C, F] a third matrix (ffn.w3,
// ffn.b3) and F = d_ff the hidden width as for the others (LLaMA's 2/3·4C is a d_ff to choose,
// not a rule applied here).
enum class Activation { Relu, Gelu, Tanh, Swiglu };

struct ActivationRow {
  Activation id;
  const char* name;     // "activation" in JSON, --activation
  kernels::Act kernel;  // act, elementwise: the decoder's forward (in the products' epilogue)
  bool gated;           // owns the gate W3 [C, F] (and b3 [F] with ffn_bias)
};

inline constexpr ActivationRow kActivations[] = {
    {Activation::Relu, "relu", kernels::Act::Relu, false},
    {Activation::Gelu, "gelu", kernels::Act::Gelu, false},
    {Activation::Tanh, "tanh", kernels::Act::Tanh, false},
    {Activation::Swiglu, "swiglu", kernels::Act::Silu, true},
};

// The row of a kind; the rows are in the enums' order.
inline const NormKindRow& norm_kind_row(NormKind k) {
  const auto i = static_cast<size_t>(k);
  if (i >= std::size(kNormKinds))
    fail("norm_kind_row", "no row for norm kind " + std::to_string(i));
  return kNormKinds[i];
}
inline const ActivationRow& activation_row(Activation a) {
  const auto i = static_cast<size_t>(a);
  if (i >= std::size(kActivations))
    fail("activation_row", "no row for activation " + std::to_string(i));
  return kActivations[i];
}

// Each table lists its enum's values in order, so a kind's value is its row's index.
template <typename Row, size_t N>
constexpr bool rows_in_enum_order(const Row (&rows)[N]) {
  for (size_t i = 0; i < N; ++i)
    if (static_cast<size_t>(rows[i].id) != i) return false;
  return true;
}
static_assert(rows_in_enum_order(kNormKinds), "kNormKinds: one row per NormKind, in its order");
static_assert(rows_in_enum_order(kActivations),
              "kActivations: one row per Activation, in its order");

}  // namespace seqtape
