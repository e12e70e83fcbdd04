#pragma once
// The small building blocks: Linear, Embedding, PositionalEncoding, LayerNorm, FeedForward.
//
// Dimension key: B batch, T time (positions), C d_model, F d_ff, V vocabulary, P max_positions,
//                N = B·T rows.
//
// Weight layout: a Linear weight is stored [in, out] and applied as y = x·W + b, like the
// reference's W_vocab ∈ R^(4×10). torch.nn.Linear stores the transpose ([out, in], y = x·Wᵀ + b);
// an export to PyTorch must transpose every projection matrix.
//
// Initialization (drawn by Module::init_parameters in registration order):
//   projection matrices  Xavier/Glorot uniform, limit sqrt(6 / (in + out))
//   token embeddings     N(0, 1) — the embedding is NOT scaled by sqrt(C): the reference adds
//                        embedding + PE directly, and the sinusoidal PE has entries of size ~1,
//                        so unit-variance rows keep token identity and position on equal footing
//   learned positions    N(0, 1), for the same reason
//   biases 0; LayerNorm gamma 1, beta 0

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/sinusoidal.h"
#include "nn/module.h"

namespace seqtape {

// y = x·W + b over the last axis: x [..., in], W [in, out], b [out] or undefined → [..., out].
Var linear(const Var& x, const Var& w, const Var& b);
// y = x·Wᵀ + b for a weight stored [out, in] (the tied output projection).
Var linear_transposed(const Var& x, const Var& w_t, const Var& b);

// The activation's op (model/kinds.h; a gated one's nonlinearity), and act(x·W + b) with W
// [in, out], fused where the kind has a fused op.
Var activate(const Var& x, Activation act);
Var affine_activate(const Var& x, const Var& w, const Var& b, Activation act);

class Linear : public Module {
 public:
  // Own weight `weight` [in, out] and (if bias) `bias` [out].
  Linear(int64_t in, int64_t out, bool bias, DType dtype);
  // Tied: no weight of its own; uses `shared` [out, in] transposed (e.g. embed.weight [V, C]).
  Linear(int64_t in, int64_t out, bool bias, const Var& shared, DType dtype);

  Var forward(const Var& x) const;               // [..., in] -> [..., out]
  const Var& weight() const { return weight_; }  // [in, out], or the shared [out, in] if tied
  const Var& bias() const { return bias_; }
  bool tied() const { return tied_; }

 private:
  Var weight_;
  Var bias_;
  bool tied_ = false;
};

class Embedding : public Module {
 public:
  Embedding(int64_t vocab, int64_t dim, DType dtype);  // `weight` [V, C]
  // ids row-major with shape ids_shape, each in [0, V) → ids_shape + [C]
  Var forward(const std::vector<int32_t>& ids, const Shape& ids_shape) const;
  const Var& weight() const { return weight_; }

 private:
  Var weight_;
};

class PositionalEncoding : public Module {
 public:
  // Sinusoidal: a constant table [P, C]. Learned: parameter `weight` [P, C]. None: nothing.
  PositionalEncoding(PosEncoding kind, int64_t max_positions, int64_t dim, double base,
                     DType dtype);
  // Rows for positions 0..T-1 → [T, C] (broadcast-add to [B, T, C]); undefined for None.
  Var forward(int64_t T) const;
  PosEncoding kind() const { return kind_; }

 private:
  PosEncoding kind_;
  int64_t max_positions_;
  Var table_;  // constant (sinusoidal) or parameter (learned)
};

// The configured norm, of any kind of model/kinds.h (LayerNorm by default).
class LayerNorm : public Module {
 public:
  // `gamma` [C] = 1, and `beta` [C] = 0 when the kind has one
  LayerNorm(int64_t dim, double eps, DType dtype, NormKind kind = NormKind::LayerNorm);
  Var forward(const Var& x) const;  // [..., C] -> [..., C]
  // LN(x + dropout(res, dropout_p)) as one fused op (the post-norm residual; rng keys the mask
  // when dropout_p > 0); [..., C], [..., C] -> [..., C]
  Var forward_add(const Var& x, const Var& res, double dropout_p = 0.0, Rng* rng = nullptr) const;

 private:
  Var gamma_;
  Var beta_;
  double eps_;
  NormKind kind_;
};

// w2·act(w1·x + b1) + b2, i.e. y = act(x·w1 + b1)·w2 + b2 in the [in, out] layout; a gated
// activation: y = (act(x·w1 + b1) ⊙ (x·w3 + b3))·w2 + b2.
class FeedForward : public Module {
 public:
  // `w1` [C, F], `b1` [F], `w2` [F, C], `b2` [C], then gated: `w3` [C, F], `b3` [F] (biases
  // only if bias)
  FeedForward(int64_t dim, int64_t hidden, Activation act, bool bias, DType dtype);
  Var forward(const Var& x) const;  // [..., C] -> [..., C]

 private:
  Var w1_, b1_, w2_, b2_, w3_, b3_;  // w3, b3: gated activations only
  Activation act_;
};

}  // namespace seqtape
