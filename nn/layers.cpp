#include "nn/layers.h"

#include <cmath>

#include "model/param_names.h"

namespace seqtape {

namespace pn = param_name;

Var linear(const Var& x, const Var& w, const Var& b) {
  return affine(x, w, b);  // [..., in] -> [..., out]
}

Var linear_transposed(const Var& x, const Var& w_t, const Var& b) {
  return affine(x, w_t, b, /*trans_w=*/true);  // [..., in] -> [..., out]
}

Var activate(const Var& x, Activation act) {
  switch (act) {
    case Activation::Relu:
      return relu(x);
    case Activation::Gelu:
      return gelu(x);
    case Activation::Tanh:
      return tanh(x);
    case Activation::Swiglu:  // the gate's nonlinearity; FeedForward multiplies by x·W3 + b3
      return silu(x);
  }
  fail("activate", "unknown activation");
}

// ---- Linear -------------------------------------------------------------------------------

Linear::Linear(int64_t in, int64_t out, bool bias, DType dtype) {
  weight_ =
      register_parameter(pn::kWeight, {in, out}, dtype, ParamInit::xavier(in, out));  // [in, out]
  if (bias) bias_ = register_parameter(pn::kBias, {out}, dtype, ParamInit::zeros());  // [out]
}

Linear::Linear(int64_t in, int64_t out, bool bias, const Var& shared, DType dtype)
    : weight_(shared), tied_(true) {
  if (!shared.defined() || shared.ndim() != 2 || shared.dim(0) != out || shared.dim(1) != in)
    fail("Linear (tied)", "shared weight must be [out, in] = " + shape_str({out, in}) + ", got " +
                              (shared.defined() ? shape_str(shared.shape()) : "undefined"));
  if (shared.dtype() != dtype) fail("Linear (tied)", "shared weight has another dtype");
  if (bias) bias_ = register_parameter(pn::kBias, {out}, dtype, ParamInit::zeros());  // [out]
}

Var Linear::forward(const Var& x) const {
  return tied_ ? linear_transposed(x, weight_, bias_) : linear(x, weight_, bias_);
}

// ---- Embedding ----------------------------------------------------------------------------

Embedding::Embedding(int64_t vocab, int64_t dim, DType dtype) {
  weight_ = register_parameter(pn::kWeight, {vocab, dim}, dtype, ParamInit::normal(1.0));  // [V, C]
}

Var Embedding::forward(const std::vector<int32_t>& ids, const Shape& ids_shape) const {
  const int64_t V = weight_.dim(0);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= V)
      fail("Embedding", "id " + std::to_string(ids[i]) + " at flat position " + std::to_string(i) +
                            " is outside the vocabulary [0, " + std::to_string(V) + ")");
  return embedding(weight_, ids, ids_shape);  // ids_shape + [C]
}

// ---- PositionalEncoding -------------------------------------------------------------------

PositionalEncoding::PositionalEncoding(PosEncoding kind, int64_t max_positions, int64_t dim,
                                       double base, DType dtype)
    : kind_(kind), max_positions_(max_positions) {
  if (kind == PosEncoding::Sinusoidal)
    table_ = Var(sinusoidal_table(static_cast<int>(max_positions), static_cast<int>(dim), base,
                                  dtype));  // [P, C], constant
  else if (kind == PosEncoding::Learned)
    table_ = register_parameter(pn::kWeight, {max_positions, dim}, dtype,
                                ParamInit::normal(1.0));  // [P, C]
}

Var PositionalEncoding::forward(int64_t T) const {
  if (kind_ == PosEncoding::None) return Var();
  if (T < 1 || T > max_positions_)
    fail("PositionalEncoding", "length " + std::to_string(T) + " outside [1, max_positions " +
                                   std::to_string(max_positions_) + "]");
  return slice(table_, 0, 0, T);  // [T, C]
}

// ---- LayerNorm ----------------------------------------------------------------------------

LayerNorm::LayerNorm(int64_t dim, double eps, DType dtype, NormKind kind) : eps_(eps), kind_(kind) {
  gamma_ = register_parameter(pn::kGamma, {dim}, dtype, ParamInit::ones());  // [C]
  if (kind == NormKind::LayerNorm)
    beta_ = register_parameter(pn::kBeta, {dim}, dtype, ParamInit::zeros());  // [C]
}

Var LayerNorm::forward(const Var& x) const {
  if (kind_ == NormKind::RmsNorm) return rms_norm(x, gamma_, eps_);
  return layer_norm(x, gamma_, beta_, eps_);
}

Var LayerNorm::forward_add(const Var& x, const Var& res, double dropout_p, Rng* rng) const {
  if (kind_ == NormKind::RmsNorm)
    return rms_norm(add_dropout(x, res, dropout_p, rng), gamma_, eps_);
  return add_layer_norm(x, res, gamma_, beta_, eps_, dropout_p, rng);
}

// ---- FeedForward --------------------------------------------------------------------------

FeedForward::FeedForward(int64_t dim, int64_t hidden, Activation act, bool bias, DType dtype)
    : act_(act) {
  w1_ =
      register_parameter(pn::kW1, {dim, hidden}, dtype, ParamInit::xavier(dim, hidden));  // [C, F]
  if (bias) b1_ = register_parameter(pn::kB1, {hidden}, dtype, ParamInit::zeros());       // [F]
  w2_ =
      register_parameter(pn::kW2, {hidden, dim}, dtype, ParamInit::xavier(hidden, dim));  // [F, C]
  if (bias) b2_ = register_parameter(pn::kB2, {dim}, dtype, ParamInit::zeros());          // [C]
  if (act == Activation::Swiglu) {
    w3_ = register_parameter(pn::kW3, {dim, hidden}, dtype,
                             ParamInit::xavier(dim, hidden));                          // [C, F]
    if (bias) b3_ = register_parameter(pn::kB3, {hidden}, dtype, ParamInit::zeros());  // [F]
  }
}

Var FeedForward::forward(const Var& x) const {
  // ReLU fused into the first product (affine_relu: one node, no pass of its own)
  Var h = act_ == Activation::Relu ? affine_relu(x, w1_, b1_)
                                   : activate(linear(x, w1_, b1_), act_);  // [..., F]
  if (act_ == Activation::Swiglu) h = mul(h, linear(x, w3_, b3_));         // [..., F]
  return linear(h, w2_, b2_);                                              // [..., C]
}

}  // namespace seqtape
