// InferenceModel: checks the named weights against the configuration and files them by role.
//
// Dimension key: V vocabulary, C d_model, F d_ff, P max_positions.
#include "infer/model.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "infer/load.h"
#include "infer/quant_io.h"
#include "io/weights.h"
#include "model/param_names.h"
#include "model/sinusoidal.h"
#include "tensor/kernels.h"

namespace seqtape {

namespace pn = param_name;

namespace {

// The given weights by name, and the matrices given quantized.
class ParamTable {
 public:
  ParamTable(const std::vector<NamedTensor>& params,
             const std::map<std::string, QuantWeight>& quantized, std::string where)
      : where_(std::move(where)), quantized_(quantized) {
    for (const NamedTensor& p : params) {
      if (!p.value.defined()) fail(where_, "parameter '" + p.name + "' is undefined");
      if (!by_name_.emplace(p.name, &p.value).second)
        fail(where_, "parameter '" + p.name + "' appears twice");
    }
  }
  // Float32 tensors are shared; float64 ones are converted. Undefined for a quantized one.
  Tensor get(const std::string& name) {
    if (quantized_.count(name)) return {};
    auto it = by_name_.find(name);
    if (it == by_name_.end()) fail(where_, "missing parameter '" + name + "'");
    const Tensor& t = *it->second;
    return t.dtype() == DType::F32 ? t : t.to(DType::F32);
  }
  Tensor maybe(const std::string& name, bool present) { return present ? get(name) : Tensor(); }
  QuantWeight quantized(const std::string& name) const {
    const auto it = quantized_.find(name);
    return it == quantized_.end() ? nullptr : it->second;
  }
  const std::string& where() const { return where_; }

 private:
  std::string where_;
  std::map<std::string, const Tensor*> by_name_;
  const std::map<std::string, QuantWeight>& quantized_;
};

// "<parent>.<leaf>": a dotted parameter path.
std::string dotted(const std::string& parent, const std::string& leaf) {
  return parent + "." + leaf;
}

AttnParams take_attention(ParamTable& t, const std::string& p, const ModelConfig& c) {
  AttnParams a;
  a.wq = t.get(dotted(p, pn::kWq));
  a.bq = t.maybe(dotted(p, pn::kBq), c.attn_bias);
  a.wk = t.get(dotted(p, pn::kWk));
  a.bk = t.maybe(dotted(p, pn::kBk), c.attn_bias);
  a.wv = t.get(dotted(p, pn::kWv));
  a.bv = t.maybe(dotted(p, pn::kBv), c.attn_bias);
  a.wo = t.get(dotted(p, pn::kWo));
  a.bo = t.maybe(dotted(p, pn::kBo), c.attn_bias);
  a.qwq = t.quantized(dotted(p, pn::kWq));
  a.qwk = t.quantized(dotted(p, pn::kWk));
  a.qwv = t.quantized(dotted(p, pn::kWv));
  a.qwo = t.quantized(dotted(p, pn::kWo));
  return a;
}
NormParams take_norm(ParamTable& t, const std::string& p, const ModelConfig& c) {
  const bool on = c.norm != NormPlacement::None;
  return {t.maybe(dotted(p, pn::kGamma), on), t.maybe(dotted(p, pn::kBeta), on)};
}
FfnParams take_ffn(ParamTable& t, const std::string& p, const ModelConfig& c) {
  return {t.get(dotted(p, pn::kW1)),       t.maybe(dotted(p, pn::kB1), c.ffn_bias),
          t.get(dotted(p, pn::kW2)),       t.maybe(dotted(p, pn::kB2), c.ffn_bias),
          t.quantized(dotted(p, pn::kW1)), t.quantized(dotted(p, pn::kW2))};
}
// A stack's final norm: pre-norm only.
NormParams take_final_norm(ParamTable& t, const char* stack, const ModelConfig& c) {
  if (c.norm != NormPlacement::Pre) return {};
  return take_norm(t, dotted(stack, pn::kFinalNorm), c);
}

std::vector<EncoderLayerParams> take_encoder_layers(ParamTable& t, const ModelConfig& c) {
  std::vector<EncoderLayerParams> layers;
  for (int64_t i = 0; i < c.n_encoder_layers; ++i) {
    const std::string p = stack_layer_path(pn::kEncoder, i);
    EncoderLayerParams l;
    l.self_attn = take_attention(t, dotted(p, pn::kSelfAttn), c);
    l.self_norm = take_norm(t, dotted(p, norm_name(1)), c);
    l.ffn = take_ffn(t, dotted(p, pn::kFfn), c);
    l.ffn_norm = take_norm(t, dotted(p, norm_name(2)), c);
    layers.push_back(std::move(l));
  }
  return layers;
}

// A seq2seq decoder layer has a cross-attention block between self-attention and feed-forward.
std::vector<DecoderLayerParams> take_decoder_layers(ParamTable& t, const ModelConfig& c,
                                                    bool cross_attention) {
  std::vector<DecoderLayerParams> layers;
  for (int64_t i = 0; i < c.n_decoder_layers; ++i) {
    const std::string p = stack_layer_path(pn::kDecoder, i);
    int sublayer = 0;
    DecoderLayerParams l;
    l.self_attn = take_attention(t, dotted(p, pn::kSelfAttn), c);
    l.self_norm = take_norm(t, dotted(p, norm_name(++sublayer)), c);
    if (cross_attention) {
      l.cross_attn = take_attention(t, dotted(p, pn::kCrossAttn), c);
      l.cross_norm = take_norm(t, dotted(p, norm_name(++sublayer)), c);
    }
    l.ffn = take_ffn(t, dotted(p, pn::kFfn), c);
    l.ffn_norm = take_norm(t, dotted(p, norm_name(++sublayer)), c);
    layers.push_back(std::move(l));
  }
  return layers;
}

// [P, C]: learned positions from the weights, sinusoidal ones computed as the training model
// does; undefined for PE none.
Tensor take_positions(ParamTable& t, const ModelConfig& c) {
  if (c.pos_encoding == PosEncoding::Learned) return t.get(dotted(pn::kPos, pn::kWeight));
  if (c.pos_encoding == PosEncoding::Sinusoidal)
    return sinusoidal_table(static_cast<int>(c.max_positions), static_cast<int>(c.d_model),
                            c.pe_base, DType::F32);
  return {};
}

// The configuration is valid and fits the vocabulary.
void check_config(const ModelConfig& cfg, const Vocab& vocab, const std::string& where) {
  try {
    cfg.validate();
  } catch (const Error& e) {
    fail(where, std::string("invalid model configuration: ") + e.what());
  }
  if (vocab.size() != cfg.vocab_size)
    fail(where, "the vocabulary has " + std::to_string(vocab.size()) +
                    " tokens, the configuration's vocab_size is " + std::to_string(cfg.vocab_size));
}

// W [in, out] (or [out, in] when out_in) → an owned copy packed in strips of 32 outputs,
// [ceil(out / 32), in, 32] (kernels::pack_strips).
Tensor packed(const Tensor& w, bool out_in = false) {
  const int64_t in = w.shape()[out_in ? 1 : 0], out = w.shape()[out_in ? 0 : 1];
  const int64_t strips = (out + kernels::kPackStrip - 1) / kernels::kPackStrip;
  Tensor t = Tensor::empty({strips, in, kernels::kPackStrip}, DType::F32);
  kernels::pack_strips(out, in, w.data<float>(), out_in ? in : 1, out_in ? 1 : out,
                       t.data<float>());
  return t;
}

void pack_attention(AttnParams& a) {
  for (Tensor* w : {&a.wq, &a.wk, &a.wv, &a.wo}) *w = packed(*w);
}

void pack_ffn(FfnParams& f) {
  f.w1 = packed(f.w1);
  f.w2 = packed(f.w2);
}

// W [in, out] → quantized as [out, in]; the float32 tensor is let go (a checkpoint's is freed
// with the params, a live model's stays its own).
QuantWeight quantized(Tensor& w, ComputeType t) {
  const int64_t in = w.shape()[0], out = w.shape()[1];
  auto q = std::make_shared<const QuantMatrix>(quantize(t, w.data<float>(), out, in, 1, out));
  w = Tensor();
  return q;
}

// Unless it came quantized (an export).
void quantize_into(QuantWeight& q, Tensor& w, ComputeType t) {
  if (!q) q = quantized(w, t);
}

void quantize_attention(AttnParams& a, ComputeType t) {
  quantize_into(a.qwq, a.wq, t);
  quantize_into(a.qwk, a.wk, t);
  quantize_into(a.qwv, a.wv, t);
  quantize_into(a.qwo, a.wo, t);
}

void quantize_ffn(FfnParams& f, ComputeType t) {
  quantize_into(f.qw1, f.w1, t);
  quantize_into(f.qw2, f.w2, t);
}

// The parameters the quantized matrices stand for, with their shapes, after checking that
// they are of the model's compute type.
std::map<std::string, Shape> quantized_shapes(const std::map<std::string, QuantWeight>& quantized,
                                              ComputeType compute, const std::string& where) {
  std::map<std::string, Shape> shapes;
  for (const auto& [name, q] : quantized) {
    if (q->type != compute)
      fail(where, "parameter '" + name + "' is quantized as " + to_string(q->type) +
                      ", but the model decodes as " + to_string(compute));
    shapes.emplace(name, stored_shape(name, *q));
  }
  return shapes;
}

size_t matrix_bytes(const Tensor& w, const QuantWeight& q) {
  return q ? q->bytes() : w.defined() ? size_t(w.numel()) * sizeof(float) : 0;
}
size_t attention_bytes(const AttnParams& a) {
  return matrix_bytes(a.wq, a.qwq) + matrix_bytes(a.wk, a.qwk) + matrix_bytes(a.wv, a.qwv) +
         matrix_bytes(a.wo, a.qwo);
}
size_t ffn_bytes(const FfnParams& f) {
  return matrix_bytes(f.w1, f.qw1) + matrix_bytes(f.w2, f.qw2);
}

}  // namespace

InferenceModel::InferenceModel(const ModelConfig& cfg, Vocab vocab,
                               const std::vector<NamedTensor>& params, const std::string& where,
                               WeightLayout layout, std::shared_ptr<const TextCodec> codec,
                               ComputeType compute,
                               const std::map<std::string, QuantWeight>& quantized)
    : cfg_(cfg),
      vocab_(std::move(vocab)),
      codec_(codec ? std::move(codec) : std::make_shared<const CharCodec>(vocab_)),
      layout_(layout),
      compute_(compute) {
  if (compute_ == ComputeType::Auto) fail(where, "compute type auto must be resolved first");
  if (codec_->vocab().tokens() != vocab_.tokens())
    fail(where, "the tokenizer's " + std::to_string(codec_->vocab().size()) +
                    " tokens are not the vocabulary of " + std::to_string(vocab_.size()));
  check_config(cfg_, vocab_, where);
  // Names, shapes and finite values against nn's parameter list (io/weights.h).
  const std::map<std::string, Shape> held = quantized_shapes(quantized, compute_, where);
  for (const auto& [name, t] : check_parameters(cfg_, params, where, held))
    parameter_count_ += static_cast<size_t>(t->numel());
  for (const auto& [name, shape] : held) parameter_count_ += size_t(shape_numel(shape));
  ParamTable table(params, quantized, where);
  embed_ = table.get(dotted(pn::kEmbed, pn::kWeight));  // [V, C]
  q_embed_ = table.quantized(dotted(pn::kEmbed, pn::kWeight));
  positions_ = take_positions(table, cfg_);  // [P, C]
  if (seq2seq()) {
    encoder_ = take_encoder_layers(table, cfg_);
    encoder_final_ = take_final_norm(table, pn::kEncoder, cfg_);
  }
  decoder_ = take_decoder_layers(table, cfg_, seq2seq());
  decoder_final_ = take_final_norm(table, pn::kDecoder, cfg_);
  tied_ = cfg_.tie_output;
  if (!tied_) out_w_ = table.get(dotted(pn::kOutProj, pn::kWeight));  // [C, V]
  if (!tied_) q_out_ = table.quantized(dotted(pn::kOutProj, pn::kWeight));
  out_b_ = table.get(dotted(pn::kOutProj, pn::kBias));  // [V]
  if (compute_ != ComputeType::F32) {
    quantize_weights();
  } else if (layout_ == WeightLayout::Decode) {
    for (EncoderLayerParams& l : encoder_) {
      pack_attention(l.self_attn);
      pack_ffn(l.ffn);
    }
    for (DecoderLayerParams& l : decoder_) {
      pack_attention(l.self_attn);
      if (seq2seq()) pack_attention(l.cross_attn);
      pack_ffn(l.ffn);
    }
    out_w_ = tied_ ? packed(embed_, true) : packed(out_w_);  // from [V, C] or [C, V]
  }
}

// The embedding (shared with a tied output projection) and every matrix, as compute_ says.
void InferenceModel::quantize_weights() {
  const int64_t V = cfg_.vocab_size, C = cfg_.d_model;
  if (!q_embed_)
    q_embed_ =
        std::make_shared<const QuantMatrix>(quantize(compute_, embed_.data<float>(), V, C, C, 1));
  embed_ = Tensor();
  if (tied_)
    q_out_ = q_embed_;
  else
    quantize_into(q_out_, out_w_, compute_);
  for (EncoderLayerParams& l : encoder_) {
    quantize_attention(l.self_attn, compute_);
    quantize_ffn(l.ffn, compute_);
  }
  for (DecoderLayerParams& l : decoder_) {
    quantize_attention(l.self_attn, compute_);
    if (seq2seq()) quantize_attention(l.cross_attn, compute_);
    quantize_ffn(l.ffn, compute_);
  }
}

size_t InferenceModel::weight_bytes() const {
  size_t b = matrix_bytes(embed_, q_embed_);
  if (!tied_ || layout_ == WeightLayout::Decode)
    b += matrix_bytes(out_w_, tied_ ? nullptr : q_out_);
  for (const EncoderLayerParams& l : encoder_) b += attention_bytes(l.self_attn) + ffn_bytes(l.ffn);
  for (const DecoderLayerParams& l : decoder_)
    b += attention_bytes(l.self_attn) + attention_bytes(l.cross_attn) + ffn_bytes(l.ffn);
  return b;
}

InferenceModel InferenceModel::load(const std::string& path, WeightLayout layout,
                                    ComputeType compute) {
  ModelFiles f = read_checkpoint_files(path);
  return InferenceModel(f.cfg, std::move(f.vocab), f.params, f.where, layout, std::move(f.codec),
                        compute);
}

}  // namespace seqtape
