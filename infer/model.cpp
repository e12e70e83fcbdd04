// InferenceModel: checks the named weights against the configuration and files them by role.
//
// Dimension key: V vocabulary, C d_model, F d_ff, P max_positions.
#include "infer/model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "nn/sinusoidal.h"
#include "train/weights.h"

namespace seqtape {

namespace {

// The given weights by name.
class ParamTable {
 public:
  ParamTable(const std::vector<NamedTensor>& params, std::string where) : where_(std::move(where)) {
    for (const NamedTensor& p : params) {
      if (!p.value.defined()) fail(where_, "parameter '" + p.name + "' is undefined");
      if (!by_name_.emplace(p.name, &p.value).second)
        fail(where_, "parameter '" + p.name + "' appears twice");
    }
  }
  // Float32 tensors are shared; float64 ones are converted.
  Tensor get(const std::string& name) {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) fail(where_, "missing parameter '" + name + "'");
    const Tensor& t = *it->second;
    return t.dtype() == DType::F32 ? t : t.to(DType::F32);
  }
  Tensor maybe(const std::string& name, bool present) { return present ? get(name) : Tensor(); }
  const std::string& where() const { return where_; }

 private:
  std::string where_;
  std::map<std::string, const Tensor*> by_name_;
};

AttnParams take_attention(ParamTable& t, const std::string& p, const ModelConfig& c) {
  AttnParams a;
  a.wq = t.get(p + ".wq");
  a.bq = t.maybe(p + ".bq", c.attn_bias);
  a.wk = t.get(p + ".wk");
  a.bk = t.maybe(p + ".bk", c.attn_bias);
  a.wv = t.get(p + ".wv");
  a.bv = t.maybe(p + ".bv", c.attn_bias);
  a.wo = t.get(p + ".wo");
  a.bo = t.maybe(p + ".bo", c.attn_bias);
  return a;
}
NormParams take_norm(ParamTable& t, const std::string& p, const ModelConfig& c) {
  const bool on = c.norm != NormPlacement::None;
  return {t.maybe(p + ".gamma", on), t.maybe(p + ".beta", on)};
}
FfnParams take_ffn(ParamTable& t, const std::string& p, const ModelConfig& c) {
  return {t.get(p + ".w1"), t.maybe(p + ".b1", c.ffn_bias), t.get(p + ".w2"),
          t.maybe(p + ".b2", c.ffn_bias)};
}

// W [in, out] → an owned [out, in] copy, in 32×32 tiles.
Tensor transposed(const Tensor& w) {
  const int64_t in = w.shape()[0], out = w.shape()[1];
  Tensor t = Tensor::empty({out, in}, DType::F32);
  const float* src = w.data<float>();
  float* dst = t.data<float>();
  constexpr int64_t kTile = 32;
  for (int64_t i0 = 0; i0 < in; i0 += kTile)
    for (int64_t o0 = 0; o0 < out; o0 += kTile)
      for (int64_t i = i0; i < std::min(in, i0 + kTile); ++i)
        for (int64_t o = o0; o < std::min(out, o0 + kTile); ++o) dst[o * in + i] = src[i * out + o];
  return t;
}

void transpose_decoder_layer(DecoderLayerParams& l, bool seq2seq) {
  for (AttnParams* a : {&l.self_attn, &l.cross_attn}) {
    if (a == &l.cross_attn && !seq2seq) continue;
    for (Tensor* w : {&a->wq, &a->wk, &a->wv, &a->wo}) *w = transposed(*w);
  }
  l.ffn.w1 = transposed(l.ffn.w1);
  l.ffn.w2 = transposed(l.ffn.w2);
}

}  // namespace

InferenceModel::InferenceModel(const ModelConfig& cfg, Vocab vocab,
                               const std::vector<NamedTensor>& params, const std::string& where,
                               WeightLayout layout)
    : cfg_(cfg), vocab_(std::move(vocab)), layout_(layout) {
  try {
    cfg_.validate();
  } catch (const Error& e) {
    fail(where, std::string("invalid model configuration: ") + e.what());
  }
  if (vocab_.size() != cfg_.vocab_size)
    fail(where, "the vocabulary has " + std::to_string(vocab_.size()) +
                    " tokens, the configuration's vocab_size is " +
                    std::to_string(cfg_.vocab_size));

  // Names, shapes and finite values against nn's parameter list (train/weights.h).
  for (const auto& [name, t] : check_parameters(cfg_, params, where))
    parameter_count_ += static_cast<size_t>(t->numel());
  ParamTable table(params, where);
  embed_ = table.get("embed.weight");  // [V, C]
  if (cfg_.pos_encoding == PosEncoding::Learned)
    positions_ = table.get("pos.weight");  // [P, C]
  else if (cfg_.pos_encoding == PosEncoding::Sinusoidal)
    positions_ = sinusoidal_table(static_cast<int>(cfg_.max_positions),
                                  static_cast<int>(cfg_.d_model), cfg_.pe_base,
                                  DType::F32);  // [P, C], the training model's table
  const bool s2s = seq2seq();
  if (s2s) {
    for (int64_t i = 0; i < cfg_.n_encoder_layers; ++i) {
      const std::string p = "encoder.layers." + std::to_string(i);
      EncoderLayerParams l;
      l.self_attn = take_attention(table, p + ".self_attn", cfg_);
      l.self_norm = take_norm(table, p + ".norm1", cfg_);
      l.ffn = take_ffn(table, p + ".ffn", cfg_);
      l.ffn_norm = take_norm(table, p + ".norm2", cfg_);
      encoder_.push_back(std::move(l));
    }
    if (cfg_.norm == NormPlacement::Pre)
      encoder_final_ = take_norm(table, "encoder.final_norm", cfg_);
  }
  for (int64_t i = 0; i < cfg_.n_decoder_layers; ++i) {
    const std::string p = "decoder.layers." + std::to_string(i);
    DecoderLayerParams l;
    l.self_attn = take_attention(table, p + ".self_attn", cfg_);
    l.self_norm = take_norm(table, p + ".norm1", cfg_);
    if (s2s) {
      l.cross_attn = take_attention(table, p + ".cross_attn", cfg_);
      l.cross_norm = take_norm(table, p + ".norm2", cfg_);
    }
    l.ffn = take_ffn(table, p + ".ffn", cfg_);
    l.ffn_norm = take_norm(table, p + (s2s ? ".norm3" : ".norm2"), cfg_);
    decoder_.push_back(std::move(l));
  }
  if (cfg_.norm == NormPlacement::Pre)
    decoder_final_ = take_norm(table, "decoder.final_norm", cfg_);
  tied_ = cfg_.tie_output;
  if (!tied_) out_w_ = table.get("out_proj.weight");  // [C, V]
  out_b_ = table.get("out_proj.bias");                // [V]
  if (layout_ == WeightLayout::Decode) {
    for (DecoderLayerParams& l : decoder_) transpose_decoder_layer(l, s2s);
    if (!tied_) out_w_ = transposed(out_w_);  // [V, C]
  }
}

InferenceModel InferenceModel::load(const std::string& path, WeightLayout layout) {
  Checkpoint ckpt = load_checkpoint(path);
  ModelConfig cfg;
  try {
    cfg = ModelConfig::from_json(nlohmann::json::parse(ckpt.config_json));
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("invalid model configuration JSON: ") + e.what());
  } catch (const Error& e) {
    fail(path, std::string("invalid model configuration: ") + e.what());
  }
  Vocab vocab = Vocab::from_tokens(ckpt.vocab, path + ": vocab");
  return InferenceModel(cfg, std::move(vocab), ckpt.params, path, layout);
}

}  // namespace seqtape
