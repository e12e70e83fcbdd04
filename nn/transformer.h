#pragma once
// Transformer layers, stacks and the two models (encoder-decoder and decoder-only).
//
// Dimension key: B batch, S source length, T target length, C d_model, V vocabulary.
//
// Token ids are flat int32 arrays, row-major [B, S] or [B, T], right-padded; lengths give the
// valid prefix of each row (1 <= len <= row width). Pad positions may hold any valid id: they
// are masked out of attention as keys, and their own outputs are ignored by the loss.
//
// Parameter names (→ Module::named_parameters, in this order):
//   embed.weight [V, C]                   shared by source and target
//   pos.weight [P, C]                     learned PE only
//   encoder.layers.N.self_attn.{wq,bq,wk,bk,wv,bv,wo,bo}
//   encoder.layers.N.norm1.{gamma,beta}   after self-attention (not with norm none)
//   encoder.layers.N.ffn.{w1,b1,w2,b2}
//   encoder.layers.N.norm2.{gamma,beta}   after the FFN
//   encoder.final_norm.{gamma,beta}       pre-norm only
//   decoder.layers.N.self_attn.*, norm1, cross_attn.*, norm2, ffn.*, norm3
//     (decoder-only: self_attn, norm1, ffn, norm2 — no cross-attention)
//   decoder.final_norm.{gamma,beta}       pre-norm only
//   out_proj.weight [C, V]                absent when tie_output (embed.weight transposed)
//   out_proj.bias [V]

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/attention.h"
#include "nn/config.h"
#include "nn/layers.h"
#include "nn/module.h"

namespace seqtape {

// Self-attention + FFN, each wrapped in residual, dropout and the configured LayerNorm.
class EncoderLayer : public Module {
 public:
  EncoderLayer(const ModelConfig& cfg, DType dtype);
  // x [B, S, C], mask broadcastable to [B, H, S, S] → [B, S, C]
  Var forward(const Var& x, const Mask& mask, Rng& rng);

 private:
  NormPlacement norm_;
  double dropout_;
  MultiHeadAttention self_attn_;
  std::unique_ptr<LayerNorm> norm1_, norm2_;
  FeedForward ffn_;
};

// Masked self-attention, [cross-attention over the encoder memory], FFN.
class DecoderLayer : public Module {
 public:
  DecoderLayer(const ModelConfig& cfg, bool cross_attention, DType dtype);
  // x [B, T, C], self_mask → [B, H, T, T]; memory [B, S, C] and cross_mask → [B, H, T, S]
  // are used only with cross-attention. → [B, T, C]
  Var forward(const Var& x, const Mask& self_mask, const Var& memory, const Mask* cross_mask,
              Rng& rng);

 private:
  NormPlacement norm_;
  double dropout_;
  MultiHeadAttention self_attn_;
  std::unique_ptr<MultiHeadAttention> cross_attn_;
  std::unique_ptr<LayerNorm> norm1_, norm2_, norm3_;
  FeedForward ffn_;
};

class Encoder : public Module {
 public:
  Encoder(const ModelConfig& cfg, DType dtype);
  Var forward(const Var& x, const Mask& mask, Rng& rng);  // [B, S, C] → [B, S, C]

 private:
  std::vector<std::unique_ptr<EncoderLayer>> layers_;
  std::unique_ptr<LayerNorm> final_norm_;  // pre-norm only
};

class Decoder : public Module {
 public:
  Decoder(const ModelConfig& cfg, bool cross_attention, DType dtype);
  Var forward(const Var& x, const Mask& self_mask, const Var& memory, const Mask* cross_mask,
              Rng& rng);  // [B, T, C] → [B, T, C]

 private:
  std::vector<std::unique_ptr<DecoderLayer>> layers_;
  std::unique_ptr<LayerNorm> final_norm_;  // pre-norm only
};

// The attention weights a forward produced, when capture is on.
struct AttentionWeights {
  std::string name;  // e.g. "decoder.layers.0.cross_attn"
  Tensor weights;    // [B, H, Tq, Tk], softmax output before dropout
};

// What both models share: the embedding, positional encoding and output projection.
class TransformerModel : public Module {
 public:
  const ModelConfig& config() const { return cfg_; }
  DType dtype() const { return dtype_; }
  const Embedding& embed() const { return embed_; }

  void set_capture_attention(bool on);
  // In parameter order (encoder layers, then decoder layers), from the last forward.
  std::vector<AttentionWeights> attention_weights() const;

 protected:
  TransformerModel(const ModelConfig& cfg, DType dtype);  // validates cfg; registers embed, pos
  void finish();  // registers out_proj after the stacks, then initializes every parameter

  // Checks ids [B, T] and len [B] (naming `what` and the offending position) and T against
  // max_positions.
  void check_batch(const char* op, const char* what, const std::vector<int32_t>& ids, int64_t B,
                   int64_t T, const std::vector<int32_t>& len) const;
  Var embed_inputs(const std::vector<int32_t>& ids, int64_t B, int64_t T, Rng& rng);  // [B,T,C]
  Var project(const Var& h) const;  // [B, T, C] → [B, T, V]

 private:
  static const ModelConfig& validated(const ModelConfig& cfg);

  ModelConfig cfg_;
  DType dtype_;
  Embedding embed_;
  PositionalEncoding pos_;
  std::unique_ptr<Linear> out_proj_;
  std::vector<std::pair<std::string, MultiHeadAttention*>> attention_;
};

class Seq2Seq : public TransformerModel {
 public:
  explicit Seq2Seq(const ModelConfig& cfg, DType dtype = DType::F32);

  // src [B, S] → memory [B, S, C]
  Var encode(const std::vector<int32_t>& src, int64_t B, int64_t S,
             const std::vector<int32_t>& src_len, Rng& rng);
  // memory [B, S, C], tgt_in [B, T] (teacher-forced decoder input) → logits [B, T, V]
  Var decode(const Var& memory, const std::vector<int32_t>& src_len,
             const std::vector<int32_t>& tgt_in, int64_t B, int64_t T,
             const std::vector<int32_t>& tgt_len, Rng& rng);
  // encode then decode → logits [B, T, V]
  Var forward(const std::vector<int32_t>& src, int64_t B, int64_t S,
              const std::vector<int32_t>& src_len, const std::vector<int32_t>& tgt_in, int64_t T,
              const std::vector<int32_t>& tgt_len, Rng& rng);

 private:
  Encoder encoder_;
  Decoder decoder_;
};

class DecoderOnly : public TransformerModel {
 public:
  explicit DecoderOnly(const ModelConfig& cfg, DType dtype = DType::F32);

  // tokens [B, T] → logits [B, T, V] (causal: position t sees tokens 0..t)
  Var forward(const std::vector<int32_t>& tokens, int64_t B, int64_t T,
              const std::vector<int32_t>& len, Rng& rng);

 private:
  Decoder decoder_;
};

}  // namespace seqtape
