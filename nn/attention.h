#pragma once
// Multi-head scaled dot-product attention, and the masks it takes.
//
// Dimension key: B batch, Tq query positions, Tk key positions, C d_model, H heads,
//                Dh = C / H head width.
//
// Parameters (names relative to the module): wq, bq, wk, bk, wv, bv, wo, bo; each w [C, C]
// in the [in, out] layout (y = x·W + b), each b [C] (only when attn_bias).

#include <cstdint>
#include <vector>

#include "nn/module.h"

namespace seqtape {

// Key padding: 1 where key j >= len[b] → [B, 1, 1, Tk].
Mask key_padding_mask(const std::vector<int32_t>& len, int64_t Tk);
// Causal and key padding combined: 1 where j > i or j >= len[b] → [B, 1, T, T].
Mask causal_padding_mask(const std::vector<int32_t>& len, int64_t T);

class MultiHeadAttention : public Module {
 public:
  MultiHeadAttention(int64_t d_model, int64_t n_heads, bool bias, double dropout, DType dtype);

  // Queries from x [B, Tq, C]; keys and values from kv [B, Tk, C] (kv = x for self-attention,
  // the encoder memory for cross-attention). mask (may be null) is 1 where attention is
  // forbidden and broadcasts to [B, H, Tq, Tk]. Dropout on the weights only when training.
  // → [B, Tq, C]
  Var forward(const Var& x, const Var& kv, const Mask* mask, Rng& rng);

  // When set, forward keeps a copy of the softmax weights (before dropout).
  void set_capture_attention(bool on) { capture_ = on; }
  const Tensor& last_attention() const { return last_attention_; }  // [B, H, Tq, Tk]

  int64_t n_heads() const { return n_heads_; }

 private:
  int64_t d_model_, n_heads_;
  double dropout_;
  Var wq_, bq_, wk_, bk_, wv_, bv_, wo_, bo_;
  bool capture_ = false;
  Tensor last_attention_;
};

}  // namespace seqtape
