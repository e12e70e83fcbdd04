// The attention and feed-forward blocks of the decoding Transformer over raw buffers.
//
// Dimension key: N positions in one call, C d_model, H heads, Dh = C / H, F d_ff, Nq queries of
// one group, Nk keys of one group.
#include "infer/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor/kernels.h"

namespace seqtape {

namespace {

// Attention of several groups below this many FLOPs (scores and context) stays on one thread.
constexpr double kParallelAttentionFlops = 131072.0;  // 2^17

// The sublayer's input: LN(x) into `in` for pre-norm, else x itself.
const float* sublayer_input(const BlockShape& d, const NormParams& norm, const float* x, int64_t N,
                            float* in) {
  if (d.norm != NormPlacement::Pre) return x;
  layer_norm(x, norm, in, N, d.C, d.eps);
  return in;
}

// The residual around a sublayer whose output is `o` (x and o [N, C]):
//   post: x = LN(x + o)   pre, none: x = x + o
void residual(const BlockShape& d, const NormParams& norm, float* x, float* o, int64_t N) {
  const int64_t total = N * d.C;
  if (d.norm == NormPlacement::Post) {
    for (int64_t i = 0; i < total; ++i) o[i] = x[i] + o[i];
    layer_norm(o, norm, x, N, d.C, d.eps);
  } else {
    for (int64_t i = 0; i < total; ++i) x[i] = x[i] + o[i];
  }
}

// Writes the group's projected K/V (rows [first, first + count) of k, v [N, C]) as its last
// `count` keys.
void append_keys(const BlockShape& d, const AttentionGroup& g, const float* k, const float* v) {
  const size_t head_bytes = size_t(d.Dh) * sizeof(float);
  const int64_t start = g.n_keys - g.count;
  for (int64_t j = 0; j < g.count; ++j)
    for (int64_t h = 0; h < d.H; ++h) {
      const int64_t dst = h * g.head_stride + (start + j) * g.row_stride;
      const int64_t src = (g.first + j) * d.C + h * d.Dh;
      std::memcpy(g.k + dst, k + src, head_bytes);
      std::memcpy(g.v + dst, v + src, head_bytes);
    }
}

// Scaled dot-product attention of one group, every head: ctx rows [first, first + count) of
// [N, C] from q rows of [N, C]. s: Nq·Nk scratch.
void attend(const BlockShape& d, const AttentionGroup& g, const float* q, float* ctx, float* s,
            const AttentionObserver& observer) {
  const int64_t n = g.count, nk = g.n_keys, Dh = d.Dh, C = d.C;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  q += g.first * C;
  ctx += g.first * C;
  for (int64_t h = 0; h < d.H; ++h) {
    const float* qh = q + h * Dh;
    const float* kh = g.k + h * g.head_stride;
    const float* vh = g.v + h * g.head_stride;
    // scores [Nq, Nk] = q_h·k_hᵀ, then ·scale as the training op does. Each score summed over
    // Dh alone (gemm_nt_rowwise), so a query's scores do not depend on how many queries share
    // the call: cached (one query) and uncached (every position) scores agree to the bit.
    kernels::gemm_nt_rowwise(n, nk, Dh, qh, C, kh, g.row_stride, s, nk);
    for (int64_t i = 0; i < n * nk; ++i) s[i] *= scale;
    if (g.append)  // causal: query t is the (nk − n + t)-th position
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = nk - n + t + 1; j < nk; ++j) s[t * nk + j] = neg_inf;
    kernels::softmax_rows<float>(s, s, n, nk);
    if (observer) {
      AttentionEvent e = g.event;
      e.head = h;
      e.n_queries = n;
      e.n_keys = nk;
      e.weights = s;
      observer(e);
    }
    // ctx_h [Nq, Dh] = weights [Nq, Nk]·v_h [Nk, Dh], each query alone
    kernels::weighted_rows(n, nk, Dh, s, nk, vh, g.row_stride, ctx + h * Dh, C);
  }
}

}  // namespace

BlockShape BlockShape::of(const ModelConfig& cfg, MatrixLayout weights) {
  BlockShape d;
  d.C = cfg.d_model;
  d.H = cfg.n_heads;
  d.Dh = cfg.d_model / cfg.n_heads;
  d.F = cfg.d_ff;
  d.eps = cfg.layer_norm_eps;
  d.norm = cfg.norm;
  d.activation = cfg.activation;
  d.weights = weights;
  return d;
}

// The bias and activation of a product whose rows are summed alone.
kernels::RowwiseEpilogue epilogue(const Tensor& b, std::optional<Activation> act) {
  const float* bias = b.defined() ? b.data<float>() : nullptr;
  return {bias, act.has_value(), act ? activation_row(*act).kernel : kernels::Act{}};
}

void linear(const float* x, int64_t N, const QuantMatrix& w, const Tensor& b, float* y,
            std::optional<Activation> act) {
  quant_linear(w, x, N, y, epilogue(b, act));
}

void project(const float* x, int64_t N, int64_t in, int64_t out, const Tensor& w,
             const QuantWeight& q, const Tensor& b, float* y, MatrixLayout layout,
             std::optional<Activation> act) {
  if (q) return linear(x, N, *q, b, y, act);
  linear(x, N, in, out, w, b, y, layout, act);
}

void linear(const float* x, int64_t N, int64_t in, int64_t out, const Tensor& w, const Tensor& b,
            float* y, MatrixLayout layout, std::optional<Activation> act) {
  if (layout == MatrixLayout::Quantized)
    fail("linear", "a quantized matrix needs its QuantMatrix (infer/quant.h)");
  const float* bias = b.defined() ? b.data<float>() : nullptr;
  // each row summed alone: a row's bits never depend on the batch
  const kernels::RowwiseEpilogue e = epilogue(b, act);
  if (layout == MatrixLayout::Packed)
    return kernels::gemm_packed(N, out, in, x, in, w.data<float>(), y, out, e);
  if (layout == MatrixLayout::OutIn)
    return kernels::gemm_nt_rowwise(N, out, in, x, in, w.data<float>(), in, y, out, e);
  if (N == 1)
    kernels::vec_mat<float>(in, out, 1.f, x, w.data<float>(), 0.f, y);
  else
    kernels::gemm<float>(false, false, N, out, in, 1.f, x, in, w.data<float>(), out, 0.f, y, out);
  if (bias) kernels::add_row_bias<float>(y, bias, N, out);
  if (act) kernels::activate<float>(y, y, N * out, activation_row(*act).kernel);
}

void layer_norm(const float* x, const NormParams& p, float* y, int64_t N, int64_t C, double eps) {
  const float* beta = p.beta.defined() ? p.beta.data<float>() : nullptr;
  norm_kind_row(p.kind).rows(x, p.gamma.data<float>(), beta, y, N, C, eps);
}

void attention_block(const BlockShape& d, const AttnParams& w, const NormParams& norm, float* x,
                     int64_t N, bool project_kv, std::span<const AttentionGroup> groups,
                     const BlockScratch& s, const AttentionObserver& observer) {
  const int64_t C = d.C;
  const float* a_in = sublayer_input(d, norm, x, N, s.in);
  project(a_in, N, C, C, w.wq, w.qwq, w.bq, s.q, d.weights);
  if (project_kv) {
    project(a_in, N, C, C, w.wk, w.qwk, w.bk, s.k, d.weights);
    project(a_in, N, C, C, w.wv, w.qwv, w.bv, s.v, d.weights);
  }
  // The groups are independent (their own queries, keys and ctx rows): split over the threads
  // gemm_nt_rowwise uses when there are several and enough work, each chunk with its own score
  // scratch; in order on this thread when traced (the observer sees them one by one).
  double work = 0;
  int64_t most = 0;
  for (const AttentionGroup& g : groups) {
    work += 4.0 * double(g.count) * double(g.n_keys) * double(C);
    most = std::max(most, g.count * g.n_keys);
  }
  const auto n_groups = static_cast<int64_t>(groups.size());
  if (observer || n_groups < 2 || work < kParallelAttentionFlops) {
    for (const AttentionGroup& g : groups) {
      if (g.append) append_keys(d, g, s.k, s.v);
      attend(d, g, s.q, s.ctx, s.scores, observer);
    }
  } else {
    const int64_t chunks = std::min<int64_t>(n_groups, 64);
    auto chunk = [&](int64_t c) {
      thread_local std::vector<float> scores;
      if (int64_t(scores.size()) < most) scores.resize(size_t(most));
      for (int64_t i = c * n_groups / chunks; i < (c + 1) * n_groups / chunks; ++i) {
        const AttentionGroup& g = groups[size_t(i)];
        if (g.append) append_keys(d, g, s.k, s.v);
        attend(d, g, s.q, s.ctx, scores.data(), observer);
      }
    };
    kernels::parallel_for(chunks, chunk);
  }
  project(s.ctx, N, C, C, w.wo, w.qwo, w.bo, s.out, d.weights);
  residual(d, norm, x, s.out, N);
}

void feed_forward_block(const BlockShape& d, const FfnParams& w, const NormParams& norm, float* x,
                        int64_t N, const BlockScratch& s) {
  const float* a_in = sublayer_input(d, norm, x, N, s.in);
  project(a_in, N, d.C, d.F, w.w1, w.qw1, w.b1, s.hid, d.weights, d.activation);
  if (activation_row(d.activation).gated) {  // hid = act(x·W1 + b1) ⊙ (x·W3 + b3)
    thread_local std::vector<float> gate;    // grows to the largest call, then no allocation
    if (int64_t(gate.size()) < N * d.F) gate.resize(size_t(N * d.F));
    project(a_in, N, d.C, d.F, w.w3, w.qw3, w.b3, gate.data(), d.weights);
    for (int64_t i = 0; i < N * d.F; ++i) s.hid[i] *= gate[i];
  }
  project(s.hid, N, d.F, d.C, w.w2, w.qw2, w.b2, s.out, d.weights);
  residual(d, norm, x, s.out, N);
}

void embed_tokens(const InferenceModel& m, const int32_t* tokens, const int64_t* positions,
                  int64_t N, float* x) {
  const int64_t C = m.config().d_model;
  const QuantMatrix* Q = m.quant_embed().get();                                       // [V, C]
  const float* E = Q ? nullptr : m.embed().data<float>();                             // [V, C]
  const float* pe = m.positions().defined() ? m.positions().data<float>() : nullptr;  // [P, C]
  for (int64_t j = 0; j < N; ++j) {
    float* xr = x + j * C;
    if (Q)  // the row dequantized in place, then the position added as below
      Q->dequantize_row(tokens[j], xr);
    else
      std::memcpy(xr, E + int64_t(tokens[j]) * C, size_t(C) * sizeof(float));
    if (pe)
      for (int64_t c = 0; c < C; ++c) xr[c] = xr[c] + pe[positions[j] * C + c];
  }
}

}  // namespace seqtape
