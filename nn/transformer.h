#pragma once
// Transformer layers, stacks and the two models (encoder-decoder and decoder-only).
//
// Dimension key: B batch, S source length, T target length, C d_model, V vocabulary.
//
// Token ids are flat int32 arrays, row-major [B, S] or [B, T], right-padded; lengths give the
// valid prefix of each row (1 <= len <= row width). Pad positions may hold any valid id: they
// are masked out of attention as keys, and their own outputs are ignored by the loss.
//
// Structure, parameter names and shapes: model/blocks.h, the one description the stacks and
// layers are built from and checkpoints, infer/ and export are checked against (a model checks
// its registered parameters against parameter_specs() at construction).
//
// The model interface (TransformerModel) is what training, evaluation and the reference
// examples call: logits and loss on a Batch (nn/batch.h), greedy decoding without a cache, the
// configuration. Only the two models know their architecture's inputs.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/blocks.h"
#include "model/config.h"
#include "nn/attention.h"
#include "nn/batch.h"
#include "nn/layers.h"
#include "nn/module.h"

namespace seqtape {

// One layer as its LayerDesc (model/blocks.h) lists it: each residual sublayer (self-attention,
// cross-attention, feed-forward) wrapped in dropout and its LayerNorm in the configured placement.
class TransformerLayer : public Module {
 public:
  TransformerLayer(const ModelConfig& cfg, const LayerDesc& desc, DType dtype);
  // x [B, T, C], self_mask → [B, H, T, T]; memory [B, S, C] and cross_mask → [B, H, T, S]
  // are used only by a cross-attention sublayer. → [B, T, C]
  Var forward(const Var& x, const Mask& self_mask, const Var& memory, const Mask* cross_mask,
              Rng& rng);

 private:
  struct Sublayer {
    SublayerKind kind;
    std::unique_ptr<MultiHeadAttention> attn;  // self- or cross-attention
    std::unique_ptr<FeedForward> ffn;
    std::unique_ptr<LayerNorm> norm;  // none with norm placement none
  };

  NormPlacement norm_;
  double dropout_;
  std::vector<Sublayer> sublayers_;
};

// A stack's layers, then its final LayerNorm (pre-norm only), as its StackDesc lists them.
class TransformerStack : public Module {
 public:
  TransformerStack(const ModelConfig& cfg, const StackDesc& desc, DType dtype);
  // x [B, T, C] → [B, T, C]; memory and cross_mask as TransformerLayer::forward.
  Var forward(const Var& x, const Mask& self_mask, const Var& memory, const Mask* cross_mask,
              Rng& rng);

 private:
  std::vector<std::unique_ptr<TransformerLayer>> layers_;
  std::unique_ptr<LayerNorm> final_norm_;
};

// The attention weights a forward produced, when capture is on.
struct AttentionWeights {
  std::string name;  // e.g. "decoder.layers.0.cross_attn"
  Tensor weights;    // [B, H, Tq, Tk], softmax output before dropout
};

// The special token ids greedy decoding needs.
struct SpecialIds {
  int32_t bos = 0, eos = 0, pad = 0;
};

// What both models share: the embedding, positional encoding and output projection; and the
// interface callers use without knowing the architecture.
class TransformerModel : public Module {
 public:
  const ModelConfig& config() const { return cfg_; }
  DType dtype() const { return dtype_; }
  const Embedding& embed() const { return embed_; }

  // Teacher-forced logits of a batch → [B, T, V]: Seq2Seq reads src/tgt_in, DecoderOnly
  // tokens (see nn/batch.h).
  virtual Var logits(const Batch& b, Rng& rng) = 0;
  // Cross-entropy of logits(b) against b.labels (nn/loss.h) → [] (scalar).
  Var loss(const Batch& b, Rng& rng, double label_smoothing = 0.0);

  // Greedy decoding without a cache, recomputing the whole prefix each step, in evaluation
  // mode and without the tape. Seq2Seq: prompts are encoder inputs and decoding starts from
  // <bos>; DecoderOnly: prompts are continued. Returns the generated ids without <bos>,
  // ending before <eos>; at most max_new each, and never past max_positions.
  std::vector<std::vector<int32_t>> greedy_uncached(
      const std::vector<std::vector<int32_t>>& prompts, const SpecialIds& ids, int64_t max_new);

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
  // greedy_uncached for this architecture (called with the tape off, in evaluation mode).
  virtual std::vector<std::vector<int32_t>> greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                   const SpecialIds& ids, int64_t max_new) = 0;

 private:
  static const ModelConfig& validated(const ModelConfig& cfg);
  // The registered names and shapes must be parameter_specs(cfg_): one list, checked.
  void check_parameter_names() const;

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
  Var logits(const Batch& b, Rng& rng) override;

 private:
  std::vector<std::vector<int32_t>> greedy(const std::vector<std::vector<int32_t>>& prompts,
                                           const SpecialIds& ids, int64_t max_new) override;

  TransformerStack encoder_;
  TransformerStack decoder_;
};

class DecoderOnly : public TransformerModel {
 public:
  explicit DecoderOnly(const ModelConfig& cfg, DType dtype = DType::F32);

  // tokens [B, T] → logits [B, T, V] (causal: position t sees tokens 0..t)
  Var forward(const std::vector<int32_t>& tokens, int64_t B, int64_t T,
              const std::vector<int32_t>& len, Rng& rng);
  Var logits(const Batch& b, Rng& rng) override;

 private:
  std::vector<std::vector<int32_t>> greedy(const std::vector<std::vector<int32_t>>& prompts,
                                           const SpecialIds& ids, int64_t max_new) override;

  TransformerStack decoder_;
};

// The model a configuration describes (Seq2Seq or DecoderOnly).
std::unique_ptr<TransformerModel> make_model(const ModelConfig& cfg, DType dtype = DType::F32);

}  // namespace seqtape
