#include "nn/attention.h"

#include <cmath>
#include <limits>

#include "model/param_names.h"
#include "nn/layers.h"

namespace seqtape {

namespace pn = param_name;

Mask key_padding_mask(const std::vector<int32_t>& len, int64_t Tk) {
  const auto B = static_cast<int64_t>(len.size());
  Mask m = Mask::zeros({B, 1, 1, Tk});  // [B, 1, 1, Tk]
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = len[b]; j < Tk; ++j) m.data[b * Tk + j] = 1;
  return m;
}

Mask causal_padding_mask(const std::vector<int32_t>& len, int64_t T) {
  const auto B = static_cast<int64_t>(len.size());
  Mask m = Mask::zeros({B, 1, T, T});  // [B, 1, T, T]
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j)
        if (j > i || j >= len[b]) m.data[(b * T + i) * T + j] = 1;
  return m;
}

MultiHeadAttention::MultiHeadAttention(int64_t d_model, int64_t n_heads, bool bias, double dropout,
                                       DType dtype)
    : d_model_(d_model), n_heads_(n_heads), dropout_(dropout) {
  if (n_heads < 1 || d_model % n_heads != 0)
    fail("MultiHeadAttention", "d_model " + std::to_string(d_model) +
                                   " is not divisible by n_heads " + std::to_string(n_heads));
  const int64_t C = d_model;
  auto w = [&](const char* name) {
    return register_parameter(name, {C, C}, dtype, ParamInit::xavier(C, C));  // [C, C]
  };
  auto b = [&](const char* name) {
    return bias ? register_parameter(name, {C}, dtype, ParamInit::zeros()) : Var();  // [C]
  };
  wq_ = w(pn::kWq);
  bq_ = b(pn::kBq);
  wk_ = w(pn::kWk);
  bk_ = b(pn::kBk);
  wv_ = w(pn::kWv);
  bv_ = b(pn::kBv);
  wo_ = w(pn::kWo);
  bo_ = b(pn::kBo);
}

Var MultiHeadAttention::forward(const Var& x, const Var& kv, const Mask* mask, Rng& rng) {
  if (x.ndim() != 3 || kv.ndim() != 3 || x.dim(2) != d_model_ || kv.dim(2) != d_model_ ||
      x.dim(0) != kv.dim(0))
    fail("MultiHeadAttention", "queries " + shape_str(x.shape()) + " and keys/values " +
                                   shape_str(kv.shape()) + " must be [B, T, " +
                                   std::to_string(d_model_) + "] with the same B");

  // One fused node, dropout on the weights included (its mask made in the same pass).
  const double p = training() ? dropout_ : 0.0;
  Var q = linear(x, wq_, bq_);   // [B, Tq, C]
  Var k = linear(kv, wk_, bk_);  // [B, Tk, C]
  Var v = linear(kv, wv_, bv_);  // [B, Tk, C]
  Var ctx = attention(q, k, v, n_heads_, mask, capture_ ? &last_attention_ : nullptr, p,
                      &rng);     // [B, Tq, C]
  return linear(ctx, wo_, bo_);  // [B, Tq, C]
}

}  // namespace seqtape
