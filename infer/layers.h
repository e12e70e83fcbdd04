#pragma once
// The decoding Transformer written once over raw float buffers, without the tape: one attention
// block and one feed-forward block. The encoder's self-attention, the decoder's cached
// self-attention and cross-attention are all attention_block(); they differ only in where the
// keys and values come from (AttentionGroup). DecodeSession keeps the caches and the rows.
//
// Rows of x are positions: any mix of sources and decoding rows, each at its own position, so
// one call can serve several rows (the queries of one group share its keys).
//
// The arithmetic mirrors nn/ (attention.cpp, layers.cpp, transformer.cpp) on the same kernels:
// y = x·W + b then add_row_bias, with W [in, out] through BLAS gemm (gemv for a single row) or,
// packed (the Decode layout), through kernels::gemm_packed, which sums every output of a row in
// an order independent of the other rows: batched and continuously batched decoding give each
// row the bits it gets alone. scores = q·kᵀ then ·(1/√Dh); masked keys are excluded (softmax
// weight exactly 0, as with −∞); LayerNorm with the configured placement. Everything else is per
// row (attention per group), so rows never mix.
//
// Dimension key: N positions in one call (rows of x), C d_model, H heads, Dh = C / H, F d_ff,
// Nq queries of one group, Nk keys of one group, P max_positions.

#include <cstdint>
#include <functional>
#include <optional>
#include <span>

#include "infer/model.h"
#include "tensor/tensor.h"

namespace seqtape {

// Tracing hook: the softmax weights of one head of one attention call, for the queries one call
// fed to one row (encoder: every position of one source).
struct AttentionEvent {
  enum class Kind { EncoderSelf, Self, Cross } kind = Kind::Self;
  int64_t layer = 0;
  int32_t row = -1;    // decoding row (Self, Cross); -1 for EncoderSelf
  int32_t source = 0;  // the row's source (EncoderSelf: the source encoded)
  int64_t head = 0;
  int64_t first_query = 0;  // position of the first query
  int64_t n_queries = 0, n_keys = 0;
  const float* weights = nullptr;  // [n_queries, n_keys]; valid during the callback only
};
using AttentionObserver = std::function<void(const AttentionEvent&)>;

// What the blocks need to know about the model, and how its matrices are stored.
struct BlockShape {
  int64_t C = 0, H = 0, Dh = 0, F = 0;
  double eps = 1e-5;
  NormPlacement norm = NormPlacement::Post;
  Activation activation = Activation::Relu;
  MatrixLayout weights = MatrixLayout::InOut;  // how the blocks' matrices are stored
  static BlockShape of(const ModelConfig& cfg, MatrixLayout weights);
};

// Scratch the blocks write into, each valid for N rows: in, q, k, v, ctx, out [N, C], hid [N, F],
// scores [Nq·Nk] for the largest group. The caller grows it once and reuses it.
struct BlockScratch {
  float *in = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *ctx = nullptr, *out = nullptr,
        *hid = nullptr, *scores = nullptr;
};

// One group of queries that share their keys and values: a source's positions in the encoder,
// or the positions one call feeds to one decoding row.
struct AttentionGroup {
  int64_t first = 0, count = 0;  // queries: rows [first, first + count) of x
  // Keys and values: head h, key j at k + h·head_stride + j·row_stride (likewise v).
  float *k = nullptr, *v = nullptr;
  int64_t head_stride = 0, row_stride = 0;
  int64_t n_keys = 0;
  // Cached self-attention: the group's own projected K/V are first written as its last `count`
  // keys, and query t sees keys [0, n_keys − count + t]. Otherwise every query sees all keys.
  bool append = false;
  AttentionEvent event;  // tracing: kind, layer, row, source, first_query (the rest is filled in)
};

// x [N, C] ← x + Attention(x), pre: x + Attn(LN(x)), post: LN(x + Attn(x)), none: x + Attn(x).
// project_kv: K and V of the N rows are projected (self-attention) into scratch k, v [N, C];
// without it the groups' keys are read as they are (cross-attention, projected once per source).
void attention_block(const BlockShape& d, const AttnParams& w, const NormParams& norm, float* x,
                     int64_t N, bool project_kv, std::span<const AttentionGroup> groups,
                     const BlockScratch& s, const AttentionObserver& observer);

// x [N, C] ← x + FFN(x) with the same residual and norm placement; FFN = act(x·W1 + b1)·W2 + b2,
// or for a gated activation (act(x·W1 + b1) ⊙ (x·W3 + b3))·W2 + b2.
void feed_forward_block(const BlockShape& d, const FfnParams& w, const NormParams& norm, float* x,
                        int64_t N, const BlockScratch& s);

// x [N, C] = embed[tokens[j]] + pe[positions[j]] (no scaling; no PE when the model has none).
void embed_tokens(const InferenceModel& m, const int32_t* tokens, const int64_t* positions,
                  int64_t N, float* x);

// y [N, out] = x [N, in]·W + b, then y = act(y) when `act` is given, W stored as `layout` says.
// InOut [in, out]: one row goes through gemv, more through one gemm with M = N. OutIn [out, in]:
// gemm_nt_rowwise; Packed: gemm_packed; both with rows independent of N, and the bias and
// activation done by the threads that sum the outputs. b may be undefined.
void linear(const float* x, int64_t N, int64_t in, int64_t out, const Tensor& w, const Tensor& b,
            float* y, MatrixLayout layout, std::optional<Activation> act = std::nullopt);

// y [N, out] = x [N, in]·Wᵀ + b, then act(y), W quantized (infer/quant.h): every row alone.
void linear(const float* x, int64_t N, const QuantMatrix& w, const Tensor& b, float* y,
            std::optional<Activation> act = std::nullopt);

// A block's matrix: linear() of its quantized form q when the model has one, else of w.
void project(const float* x, int64_t N, int64_t in, int64_t out, const Tensor& w,
             const QuantWeight& q, const Tensor& b, float* y, MatrixLayout layout,
             std::optional<Activation> act = std::nullopt);

// y [N, C] = the norm of x with its gamma (and beta), by its kind's kernel (y may be x).
void layer_norm(const float* x, const NormParams& p, float* y, int64_t N, int64_t C, double eps);

}  // namespace seqtape
