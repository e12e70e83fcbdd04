#pragma once
// The differentiable ops. Each is a free function that checks shapes (throwing seqtape::Error
// with the op's name and the shapes), computes its result with the kernels, and — when any
// input requires grad and the tape is recording — records a backward closure that keeps only
// what the derivative needs. Every backward adds (+=) into its inputs' gradients.
//
// All inputs of an op must share one dtype (float32 or float64); the result has it too.

#include <cstdint>
#include <vector>

#include "autograd/tape.h"
#include "tensor/rng.h"
#include "tensor/tensor.h"

namespace seqtape {

// A boolean mask (1 = masked) whose shape broadcasts to the tensor it is applied to.
struct Mask {
  Shape shape;
  std::vector<uint8_t> data;
  Mask() = default;
  Mask(Shape s, std::vector<uint8_t> d) : shape(std::move(s)), data(std::move(d)) {}
  static Mask zeros(Shape s) {
    auto n = static_cast<size_t>(shape_numel(s));
    return Mask(std::move(s), std::vector<uint8_t>(n, 0));
  }
  // [T, T] with 1 above the diagonal: position i may not look at j > i.
  static Mask causal(int64_t t);
};

// ---- linear algebra -------------------------------------------------------------------
// C = op(A)·op(B), op = transpose when the flag is set. 2-D: [M,K]·[K,N]. Batched:
// a [..., M, K] with b [..., K, N] (same leading dims), or b 2-D shared by every batch.
Var matmul(const Var& a, const Var& b, bool trans_a = false, bool trans_b = false);

// y = x·op(W) + b over the last axis of x, fused into one node: x [..., K], W [K, N] (or
// [N, K] with trans_w), b [N] or undefined → [..., N]. The bias is added in place of a
// separate broadcast add, and its gradient is a column sum of the upstream gradient.
Var affine(const Var& x, const Var& w, const Var& b, bool trans_w = false);
// relu(affine(x, W, b)) as one node (a feed-forward layer's first half): the ReLU is applied in
// the product's epilogue (oneDNN) or in the bias pass (OpenBLAS), and its backward masks the
// upstream gradient once before the products. The same values and gradients as the two ops,
// which it runs instead under anomaly mode (a NaN product must not hide behind the ReLU).
Var affine_relu(const Var& x, const Var& w, const Var& b);

// ---- elementwise, with NumPy broadcasting ----------------------------------------------
Var add(const Var& a, const Var& b);
Var sub(const Var& a, const Var& b);
Var mul(const Var& a, const Var& b);
Var div(const Var& a, const Var& b);
Var add(const Var& a, double s);
Var mul(const Var& a, double s);
Var rsub(double s, const Var& a);  // s - a
Var neg(const Var& a);
Var exp(const Var& a);
Var log(const Var& a);
Var sqrt(const Var& a);
Var tanh(const Var& a);
Var relu(const Var& a);
Var gelu(const Var& a);  // exact: x·Φ(x)
Var silu(const Var& a);  // x·σ(x), the gate of SwiGLU

inline Var operator+(const Var& a, const Var& b) {
  return add(a, b);
}
inline Var operator-(const Var& a, const Var& b) {
  return sub(a, b);
}
inline Var operator*(const Var& a, const Var& b) {
  return mul(a, b);
}
inline Var operator/(const Var& a, const Var& b) {
  return div(a, b);
}
inline Var operator+(const Var& a, double s) {
  return add(a, s);
}
inline Var operator-(const Var& a, double s) {
  return add(a, -s);
}
inline Var operator*(const Var& a, double s) {
  return mul(a, s);
}
inline Var operator*(double s, const Var& a) {
  return mul(a, s);
}
inline Var operator/(const Var& a, double s) {
  return mul(a, 1.0 / s);
}
inline Var operator-(const Var& a) {
  return neg(a);
}

// ---- reductions -------------------------------------------------------------------------
Var sum(const Var& a);                                  // all elements -> shape []
Var sum(const Var& a, int axis, bool keepdim = false);  // along one axis
Var mean(const Var& a);
Var mean(const Var& a, int axis, bool keepdim = false);

// ---- shape ------------------------------------------------------------------------------
Var reshape(const Var& a, Shape shape);  // one dimension may be -1
Var transpose(const Var& a, int d0, int d1);
Var permute(const Var& a, const std::vector<int>& perm);
Var concat(const std::vector<Var>& parts, int axis);
Var slice(const Var& a, int axis, int64_t start, int64_t end);  // [start, end)

// ---- lookup and masking -----------------------------------------------------------------
// rows of weight [V, C] picked by ids (shape ids_shape) -> ids_shape + [C]. Backward
// scatter-adds: a row used twice receives the sum of both gradients.
Var embedding(const Var& weight, const std::vector<int32_t>& ids, const Shape& ids_shape);
// Where mask is 1 the result is value (its gradient is 0 there); elsewhere a.
Var masked_fill(const Var& a, const Mask& mask, double value);

// ---- normalization and probabilities (last axis) ---------------------------------------
// Max-subtracted. A row that is entirely -inf (a fully masked attention row) gives
// all-zero probabilities and zero gradient instead of NaN.
Var softmax(const Var& a);
Var log_softmax(const Var& a);
// Fused: (x - mean)·rstd·gamma + beta over the last axis; saves mean and rstd.
Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps = 1e-5);
// RMSNorm over the last axis: x·γ / sqrt(mean(x²) + eps), γ [C] (no mean, no bias).
Var rms_norm(const Var& x, const Var& gamma, double eps = 1e-5);
// Fused residual + LayerNorm: layer_norm(x + res, gamma, beta, eps) in one node (the post-norm
// sublayer's LN(x + f(x))); saves the sum, mean and rstd, and writes the sum's gradient
// straight into both inputs. With dropout_p > 0, res goes through dropout(·, p, true, *rng)
// first, with the very mask that op would draw (one draw from rng keys it), applied in the same
// pass as the add; its keep bits (1 per element) are kept for the backward.
Var add_layer_norm(const Var& x, const Var& res, const Var& gamma, const Var& beta,
                   double eps = 1e-5, double dropout_p = 0.0, Rng* rng = nullptr);
// Inverted dropout: zeroes with probability p and scales the rest by 1/(1-p). Identity
// when !training or p == 0.
Var dropout(const Var& a, double p, bool training, Rng& rng);
// x + dropout(y, p, true, *rng) in one node (a residual add of a dropped sublayer output), with
// the very mask and bits of the two ops; add(x, y) when p == 0. x and y have one shape.
Var add_dropout(const Var& x, const Var& y, double p, Rng* rng);

// ---- attention ---------------------------------------------------------------------------
// Multi-head scaled dot-product attention fused into one node: per batch b and head h,
// ctx = softmax(mask(Q·Kᵀ/√Dh))·V, where Q, K, V are head h's column block [h·Dh, (h+1)·Dh)
// of q [B, Tq, C], k [B, Tk, C], v [B, Tk, C] (read in place, no permute copies) and ctx is
// written into the same block of the result [B, Tq, C]. mask (may be null, 1 = forbidden)
// broadcasts to [B, H, Tq, Tk]; a fully masked row attends to nothing (zeros, zero gradient).
// The backward makes one pass over each head's scores. `weights`, when given, receives a copy
// of the probabilities [B, H, Tq, Tk] (before dropout). With dropout p > 0 the probabilities
// go through dropout(·, p, true, *rng) before P·V, with the very mask that op would draw (one
// draw from rng keys it), its keep bits (1 per element) kept for the backward.
Var attention(const Var& q, const Var& k, const Var& v, int64_t heads, const Mask* mask,
              Tensor* weights = nullptr, double dropout_p = 0.0, Rng* rng = nullptr);

// ---- loss -------------------------------------------------------------------------------
// Fused log_softmax + negative log-likelihood over logits [..., V] and one target per row.
// Mean over rows whose target != ignore_index. With label smoothing e the target
// distribution is (1-e)·onehot + e/V. A batch whose targets are all ignored gives loss 0
// and zero gradients (not NaN).
struct CrossEntropyOptions {
  int32_t ignore_index = -100;
  double label_smoothing = 0.0;
};
Var cross_entropy(const Var& logits, const std::vector<int32_t>& targets,
                  CrossEntropyOptions opt = {});

}  // namespace seqtape
