// The Transformer layers, stacks and models. Dimension key: B batch, S source length, T target
// length, C d_model, V vocabulary.
#include "nn/transformer.h"

#include <algorithm>
#include <cmath>

#include "model/param_names.h"
#include "nn/loss.h"

namespace seqtape {

namespace pn = param_name;

namespace {

std::unique_ptr<LayerNorm> make_norm(const ModelConfig& cfg, DType dtype) {
  if (cfg.norm == NormPlacement::None) return nullptr;
  return std::make_unique<LayerNorm>(cfg.d_model, cfg.layer_norm_eps, dtype, cfg.norm_kind);
}

// One residual sublayer in the configured placement:
//   post: LN(x + drop(f(x)))   pre: x + drop(f(LN(x)))   none: x + drop(f(x))
// The dropout is fused into the add (one node, one pass), with the mask dropout would draw.
template <typename F>
Var residual(const Var& x, NormPlacement placement, const LayerNorm* norm, double p, bool training,
             Rng& rng, F&& f) {
  const double pd = training ? p : 0.0;
  if (placement == NormPlacement::Pre) return add_dropout(x, f(norm->forward(x)), pd, &rng);
  if (placement == NormPlacement::Post) return norm->forward_add(x, f(x), pd, &rng);
  return add_dropout(x, f(x), pd, &rng);
}

}  // namespace

// ---- layers -------------------------------------------------------------------------------

TransformerLayer::TransformerLayer(const ModelConfig& cfg, const LayerDesc& desc, DType dtype)
    : norm_(cfg.norm), dropout_(cfg.dropout) {
  sublayers_.reserve(desc.sublayers.size());  // registered modules must not move
  for (const SublayerDesc& d : desc.sublayers) {
    Sublayer& s = sublayers_.emplace_back(Sublayer{d.kind, nullptr, nullptr, nullptr});
    if (d.kind == SublayerKind::FeedForward) {
      s.ffn =
          std::make_unique<FeedForward>(cfg.d_model, cfg.d_ff, cfg.activation, cfg.ffn_bias, dtype);
      register_module(d.name, *s.ffn);
    } else {
      s.attn = std::make_unique<MultiHeadAttention>(cfg.d_model, cfg.n_heads, cfg.attn_bias,
                                                    cfg.attn_dropout(), dtype);
      register_module(d.name, *s.attn);
    }
    if (!d.norm.empty()) {
      s.norm = make_norm(cfg, dtype);
      register_module(d.norm, *s.norm);
    }
  }
}

Var TransformerLayer::forward(const Var& x, const Mask& self_mask, const Var& memory,
                              const Mask* cross_mask, Rng& rng) {
  Var h = x;
  for (const Sublayer& s : sublayers_) {
    if (s.kind == SublayerKind::CrossAttention && !memory.defined())
      fail("TransformerLayer", "cross-attention needs the encoder memory");
    h = residual(h, norm_, s.norm.get(), dropout_, training(), rng, [&](const Var& in) {
      if (s.kind == SublayerKind::FeedForward) return s.ffn->forward(in);  // [B, T, C]
      if (s.kind == SublayerKind::CrossAttention)
        return s.attn->forward(in, memory, cross_mask, rng);  // [B, T, C]
      return s.attn->forward(in, in, &self_mask, rng);        // [B, T, C]
    });
  }
  return h;
}

// ---- stacks -------------------------------------------------------------------------------

TransformerStack::TransformerStack(const ModelConfig& cfg, const StackDesc& desc, DType dtype) {
  for (size_t i = 0; i < desc.layers.size(); ++i) {
    layers_.push_back(std::make_unique<TransformerLayer>(cfg, desc.layers[i], dtype));
    register_module(layer_name(static_cast<int64_t>(i)), *layers_.back());
  }
  if (!desc.final_norm.empty()) {
    final_norm_ = make_norm(cfg, dtype);
    register_module(desc.final_norm, *final_norm_);
  }
}

Var TransformerStack::forward(const Var& x, const Mask& self_mask, const Var& memory,
                              const Mask* cross_mask, Rng& rng) {
  Var h = x;
  for (auto& layer : layers_)
    h = layer->forward(h, self_mask, memory, cross_mask, rng);  // [B, T, C]
  return final_norm_ ? final_norm_->forward(h) : h;             // [B, T, C]
}

// ---- shared model parts -------------------------------------------------------------------

const ModelConfig& TransformerModel::validated(const ModelConfig& cfg) {
  cfg.validate();
  return cfg;
}

TransformerModel::TransformerModel(const ModelConfig& cfg, DType dtype)
    : cfg_(validated(cfg)),
      dtype_(dtype),
      embed_(cfg.vocab_size, cfg.d_model, dtype),
      pos_(cfg.pos_encoding, cfg.max_positions, cfg.d_model, cfg.pe_base, dtype) {
  register_module(pn::kEmbed, embed_);
  register_module(pn::kPos, pos_);
}

void TransformerModel::finish() {
  if (cfg_.tie_output)
    out_proj_ =
        std::make_unique<Linear>(cfg_.d_model, cfg_.vocab_size, true, embed_.weight(), dtype_);
  else
    out_proj_ = std::make_unique<Linear>(cfg_.d_model, cfg_.vocab_size, true, dtype_);
  register_module(pn::kOutProj, *out_proj_);
  check_parameter_names();
  init_parameters(cfg_.init_seed);
  visit_modules([this](const std::string& path, Module& m) {
    if (auto* mha = dynamic_cast<MultiHeadAttention*>(&m)) attention_.emplace_back(path, mha);
  });
}

void TransformerModel::check_parameter_names() const {
  const auto specs = parameter_specs(cfg_);
  const auto params = named_parameters();
  for (size_t i = 0; i < std::max(specs.size(), params.size()); ++i) {
    const std::string registered =
        i < params.size() ? params[i].first + " " + shape_str(params[i].second.shape()) : "nothing";
    const std::string listed =
        i < specs.size() ? specs[i].name + " " + shape_str(specs[i].shape) : "nothing";
    if (registered != listed)
      throw std::logic_error("TransformerModel: parameter " + std::to_string(i) + " is " +
                             registered + ", model/param_names.h lists " + listed);
  }
}

Var TransformerModel::loss(const Batch& b, Rng& rng, double label_smoothing) {
  return sequence_loss(logits(b, rng), b.labels, label_smoothing);  // []
}

std::vector<std::vector<int32_t>> TransformerModel::greedy_uncached(
    const std::vector<std::vector<int32_t>>& prompts, const SpecialIds& ids, int64_t max_new) {
  NoGradGuard no_grad;
  TrainingModeGuard eval_mode(*this, false);
  return greedy(prompts, ids, max_new);
}

void TransformerModel::set_capture_attention(bool on) {
  for (auto& [name, mha] : attention_) mha->set_capture_attention(on);
}

std::vector<AttentionWeights> TransformerModel::attention_weights() const {
  std::vector<AttentionWeights> out;
  for (const auto& [name, mha] : attention_)
    if (mha->last_attention().defined()) out.push_back({name, mha->last_attention()});
  return out;
}

void TransformerModel::check_batch(const char* op, const char* what,
                                   const std::vector<int32_t>& ids, int64_t B, int64_t T,
                                   const std::vector<int32_t>& len) const {
  const std::string w(what);
  if (B < 1 || T < 1)
    fail(op, w + " batch must have B >= 1 and length >= 1, got B=" + std::to_string(B) +
                 ", length=" + std::to_string(T));
  if (T > cfg_.max_positions)
    fail(op, w + " length " + std::to_string(T) + " exceeds max_positions " +
                 std::to_string(cfg_.max_positions));
  if (static_cast<int64_t>(ids.size()) != B * T)
    fail(op, w + " has " + std::to_string(ids.size()) +
                 " ids, expected B*T = " + std::to_string(B) + "*" + std::to_string(T));
  if (static_cast<int64_t>(len.size()) != B)
    fail(op, w + " lengths: " + std::to_string(len.size()) +
                 " given, expected B = " + std::to_string(B));
  for (int64_t b = 0; b < B; ++b)
    if (len[b] < 1 || len[b] > T)
      fail(op, w + " length[" + std::to_string(b) + "] = " + std::to_string(len[b]) +
                   " outside [1, " + std::to_string(T) + "]");
  for (int64_t i = 0; i < B * T; ++i)
    if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
      fail(op, w + " id " + std::to_string(ids[i]) + " at [" + std::to_string(i / T) + "," +
                   std::to_string(i % T) + "] is outside the vocabulary [0, " +
                   std::to_string(cfg_.vocab_size) + ")");
}

Var TransformerModel::embed_inputs(const std::vector<int32_t>& ids, int64_t B, int64_t T,
                                   Rng& rng) {
  Var x = embed_.forward(ids, {B, T});  // [B, T, C]
  Var pe = pos_.forward(T);             // [T, C] or undefined
  if (pe.defined()) x = add(x, pe);     // [B, T, C]
  return dropout(x, cfg_.dropout, training(), rng);
}

Var TransformerModel::project(const Var& h) const {
  return out_proj_->forward(h);
}  // [B,T,V]

// ---- Seq2Seq ------------------------------------------------------------------------------

Seq2Seq::Seq2Seq(const ModelConfig& cfg, DType dtype)
    : TransformerModel(cfg, dtype),
      encoder_(config(), stack_blocks(config(), pn::kEncoder), dtype),
      decoder_(config(), stack_blocks(config(), pn::kDecoder), dtype) {
  if (config().arch != Arch::Seq2Seq)
    fail("Seq2Seq",
         "config arch is '" + std::string(to_string(config().arch)) + "', expected 'seq2seq'");
  register_module(pn::kEncoder, encoder_);
  register_module(pn::kDecoder, decoder_);
  finish();
}

Var Seq2Seq::encode(const std::vector<int32_t>& src, int64_t B, int64_t S,
                    const std::vector<int32_t>& src_len, Rng& rng) {
  check_batch("Seq2Seq::encode", "src", src, B, S, src_len);
  Var x = embed_inputs(src, B, S, rng);                   // [B, S, C]
  Mask mask = key_padding_mask(src_len, S);               // [B, 1, 1, S]
  return encoder_.forward(x, mask, Var(), nullptr, rng);  // [B, S, C]
}

Var Seq2Seq::decode(const Var& memory, const std::vector<int32_t>& src_len,
                    const std::vector<int32_t>& tgt_in, int64_t B, int64_t T,
                    const std::vector<int32_t>& tgt_len, Rng& rng) {
  check_batch("Seq2Seq::decode", "tgt_in", tgt_in, B, T, tgt_len);
  if (!memory.defined() || memory.ndim() != 3 || memory.dim(0) != B ||
      memory.dim(2) != config().d_model)
    fail("Seq2Seq::decode", "memory must be [B=" + std::to_string(B) +
                                ", S, C=" + std::to_string(config().d_model) + "], got " +
                                (memory.defined() ? shape_str(memory.shape()) : "undefined"));
  const int64_t S = memory.dim(1);
  if (static_cast<int64_t>(src_len.size()) != B)
    fail("Seq2Seq::decode", "src_len has " + std::to_string(src_len.size()) +
                                " entries, expected B = " + std::to_string(B));
  for (int64_t b = 0; b < B; ++b)
    if (src_len[b] < 1 || src_len[b] > S)
      fail("Seq2Seq::decode", "src_len[" + std::to_string(b) + "] = " + std::to_string(src_len[b]) +
                                  " outside [1, " + std::to_string(S) + "]");
  Var y = embed_inputs(tgt_in, B, T, rng);                           // [B, T, C]
  Mask self_mask = causal_padding_mask(tgt_len, T);                  // [B, 1, T, T]
  Mask cross_mask = key_padding_mask(src_len, S);                    // [B, 1, 1, S]
  Var h = decoder_.forward(y, self_mask, memory, &cross_mask, rng);  // [B, T, C]
  return project(h);                                                 // [B, T, V]
}

Var Seq2Seq::forward(const std::vector<int32_t>& src, int64_t B, int64_t S,
                     const std::vector<int32_t>& src_len, const std::vector<int32_t>& tgt_in,
                     int64_t T, const std::vector<int32_t>& tgt_len, Rng& rng) {
  Var memory = encode(src, B, S, src_len, rng);                // [B, S, C]
  return decode(memory, src_len, tgt_in, B, T, tgt_len, rng);  // [B, T, V]
}

Var Seq2Seq::logits(const Batch& b, Rng& rng) {
  return forward(b.src, b.B, b.S, b.src_len, b.tgt_in, b.T, b.tgt_len, rng);  // [B, T, V]
}

namespace {

// The index of the largest of logits[offset .. offset+V) (the first one on a tie).
int32_t argmax_row(const Tensor& logits, int64_t offset, int64_t V) {
  int64_t best = 0;
  double bv = -INFINITY;
  for (int64_t j = 0; j < V; ++j) {
    const double x = logits.get(offset + j);
    if (x > bv) bv = x, best = j;
  }
  return static_cast<int32_t>(best);
}

// Prompts right-padded into one [B, S] batch.
struct PaddedRows {
  std::vector<int32_t> ids, len;  // [B*S], [B]
  int64_t B = 0, S = 0;
};

PaddedRows pad_rows(const std::vector<std::vector<int32_t>>& rows, int32_t pad) {
  PaddedRows p;
  p.B = static_cast<int64_t>(rows.size());
  for (const auto& r : rows) p.S = std::max<int64_t>(p.S, static_cast<int64_t>(r.size()));
  p.ids.assign(static_cast<size_t>(p.B * p.S), pad);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy(rows[i].begin(), rows[i].end(), p.ids.begin() + static_cast<int64_t>(i) * p.S);
    p.len.push_back(static_cast<int32_t>(rows[i].size()));
  }
  return p;
}

}  // namespace

// Encodes the batch once; recomputes the whole decoder prefix every step.
std::vector<std::vector<int32_t>> Seq2Seq::greedy(const std::vector<std::vector<int32_t>>& prompts,
                                                  const SpecialIds& ids, int64_t max_new) {
  std::vector<std::vector<int32_t>> out(prompts.size());
  if (prompts.empty()) return out;
  Rng rng(0);  // unused: no dropout in evaluation mode
  const PaddedRows src = pad_rows(prompts, ids.pad);
  const int64_t B = src.B, V = config().vocab_size;
  Var memory = encode(src.ids, B, src.S, src.len, rng);  // [B, S, C]
  std::vector<std::vector<int32_t>> seq(prompts.size(), std::vector<int32_t>{ids.bos});
  std::vector<bool> done(prompts.size(), false);
  const int64_t limit = std::min(max_new, config().max_positions - 1);
  for (int64_t t = 1; t <= limit; ++t) {
    const PaddedRows tgt = pad_rows(seq, ids.pad);                      // [B, t]
    Var logits = decode(memory, src.len, tgt.ids, B, t, tgt.len, rng);  // [B, t, V]
    bool all_done = true;
    for (size_t i = 0; i < seq.size(); ++i) {
      if (done[i]) {
        seq[i].push_back(ids.pad);  // keeps rows rectangular; never read
        continue;
      }
      const int32_t next = argmax_row(logits.value(), (static_cast<int64_t>(i) * t + t - 1) * V, V);
      seq[i].push_back(next);
      done[i] = next == ids.eos;
      if (!done[i]) out[i].push_back(next);
      all_done = all_done && done[i];
    }
    if (all_done) break;
  }
  return out;
}

// ---- DecoderOnly --------------------------------------------------------------------------

DecoderOnly::DecoderOnly(const ModelConfig& cfg, DType dtype)
    : TransformerModel(cfg, dtype),
      decoder_(config(), stack_blocks(config(), pn::kDecoder), dtype) {
  if (config().arch != Arch::DecoderOnly)
    fail("DecoderOnly",
         "config arch is '" + std::string(to_string(config().arch)) + "', expected 'decoder_only'");
  register_module(pn::kDecoder, decoder_);
  finish();
}

Var DecoderOnly::forward(const std::vector<int32_t>& tokens, int64_t B, int64_t T,
                         const std::vector<int32_t>& len, Rng& rng) {
  check_batch("DecoderOnly::forward", "tokens", tokens, B, T, len);
  Var x = embed_inputs(tokens, B, T, rng);                 // [B, T, C]
  Mask mask = causal_padding_mask(len, T);                 // [B, 1, T, T]
  Var h = decoder_.forward(x, mask, Var(), nullptr, rng);  // [B, T, C]
  return project(h);                                       // [B, T, V]
}

Var DecoderOnly::logits(const Batch& b, Rng& rng) {
  return forward(b.tokens, b.B, b.T, b.len, rng);  // [B, T, V]
}

// One prompt at a time, the whole sequence recomputed for every new token.
std::vector<std::vector<int32_t>> DecoderOnly::greedy(
    const std::vector<std::vector<int32_t>>& prompts, const SpecialIds& ids, int64_t max_new) {
  Rng rng(0);  // unused: no dropout in evaluation mode
  const int64_t V = config().vocab_size;
  std::vector<std::vector<int32_t>> out(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    std::vector<int32_t> seq = prompts[i];
    for (int64_t n = 0; n < max_new && static_cast<int64_t>(seq.size()) < config().max_positions;
         ++n) {
      const auto T = static_cast<int64_t>(seq.size());
      Var logits = forward(seq, 1, T, {static_cast<int32_t>(T)}, rng);  // [1, T, V]
      const int32_t next = argmax_row(logits.value(), (T - 1) * V, V);
      if (next == ids.eos) break;
      out[i].push_back(next);
      seq.push_back(next);
    }
  }
  return out;
}

std::unique_ptr<TransformerModel> make_model(const ModelConfig& cfg, DType dtype) {
  if (cfg.arch == Arch::Seq2Seq) return std::make_unique<Seq2Seq>(cfg, dtype);
  return std::make_unique<DecoderOnly>(cfg, dtype);
}

}  // namespace seqtape
