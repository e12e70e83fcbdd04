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

namespace {

// Each norm kind's forward on the tape (model/kinds.h lists the kinds): alone, and after the
// post-norm residual's add (one fused op where the kind has one).
struct TapeNorm {
  NormKind id;
  Var (*forward)(const Var& x, const Var& gamma, const Var& beta, double eps);
  // norm(dropout(x) + res): the residual's dropout fused into the add (dropout_p 0: none).
  Var (*forward_add)(const Var& x, const Var& res, const Var& gamma, const Var& beta, double eps,
                     double dropout_p, Rng* rng);
};
constexpr TapeNorm kTapeNorms[] = {
    {NormKind::LayerNorm,
     [](const Var& x, const Var& g, const Var& b, double eps) { return layer_norm(x, g, b, eps); },
     [](const Var& x, const Var& r, const Var& g, const Var& b, double eps, double p, Rng* rng) {
       return add_layer_norm(x, r, g, b, eps, p, rng);
     }},
    {NormKind::RmsNorm,
     [](const Var& x, const Var& g, const Var&, double eps) { return rms_norm(x, g, eps); },
     [](const Var& x, const Var& r, const Var& g, const Var&, double eps, double p, Rng* rng) {
       return rms_norm(add_dropout(x, r, p, rng), g, eps);
     }},
};

// Each activation's op on the tape, and act(x·W + b) as one op where there is one (ReLU in the
// product's epilogue: no pass of its own); a gated activation's op is its gate's nonlinearity.
struct TapeActivation {
  Activation id;
  Var (*apply)(const Var& x);
  Var (*affine)(const Var& x, const Var& w, const Var& b);  // null: apply(linear(x, w, b))
};
constexpr TapeActivation kTapeActivations[] = {
    {Activation::Relu, [](const Var& x) { return relu(x); },
     [](const Var& x, const Var& w, const Var& b) { return affine_relu(x, w, b); }},
    {Activation::Gelu, [](const Var& x) { return gelu(x); }, nullptr},
    {Activation::Tanh, [](const Var& x) { return tanh(x); }, nullptr},
    {Activation::Swiglu, [](const Var& x) { return silu(x); }, nullptr},
};

// Every kind of model/kinds.h has its row here, at the same place.
template <typename Row, size_t N, typename KindRow, size_t K>
constexpr bool same_kinds(const Row (&rows)[N], const KindRow (&kinds)[K]) {
  if (N != K) return false;
  for (size_t i = 0; i < N; ++i)
    if (rows[i].id != kinds[i].id) return false;
  return true;
}
static_assert(same_kinds(kTapeNorms, kNormKinds), "kTapeNorms: one row per row of kNormKinds");
static_assert(same_kinds(kTapeActivations, kActivations),
              "kTapeActivations: one row per row of kActivations");

const TapeNorm& tape_norm(NormKind k) {
  norm_kind_row(k);  // a known kind, else an Error naming it
  return kTapeNorms[static_cast<size_t>(k)];
}

const TapeActivation& tape_activation(Activation a) {
  activation_row(a);
  return kTapeActivations[static_cast<size_t>(a)];
}

}  // namespace

Var activate(const Var& x, Activation act) {
  return tape_activation(act).apply(x);
}

Var affine_activate(const Var& x, const Var& w, const Var& b, Activation act) {
  const TapeActivation& t = tape_activation(act);
  return t.affine ? t.affine(x, w, b) : t.apply(linear(x, w, b));
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
  if (norm_kind_row(kind).beta)
    beta_ = register_parameter(pn::kBeta, {dim}, dtype, ParamInit::zeros());  // [C]
}

Var LayerNorm::forward(const Var& x) const {
  return tape_norm(kind_).forward(x, gamma_, beta_, eps_);
}

Var LayerNorm::forward_add(const Var& x, const Var& res, double dropout_p, Rng* rng) const {
  return tape_norm(kind_).forward_add(x, res, gamma_, beta_, eps_, dropout_p, rng);
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
  if (activation_row(act).gated) {
    w3_ = register_parameter(pn::kW3, {dim, hidden}, dtype,
                             ParamInit::xavier(dim, hidden));                          // [C, F]
    if (bias) b3_ = register_parameter(pn::kB3, {hidden}, dtype, ParamInit::zeros());  // [F]
  }
}

Var FeedForward::forward(const Var& x) const {
  Var h = affine_activate(x, w1_, b1_, act_);          // [..., F]
  if (w3_.defined()) h = mul(h, linear(x, w3_, b3_));  // [..., F], gated
  return linear(h, w2_, b2_);                          // [..., C]
}

}  // namespace seqtape
