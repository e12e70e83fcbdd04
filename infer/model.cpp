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
#include "model/blocks.h"
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
// Undefined (no name): no norm.
NormParams take_norm(ParamTable& t, const std::string& parent, const std::string& name,
                     const ModelConfig& c) {
  if (name.empty()) return {};
  const std::string p = dotted(parent, name);
  const bool beta = norm_kind_row(c.norm_kind).beta;
  return {t.get(dotted(p, pn::kGamma)), t.maybe(dotted(p, pn::kBeta), beta), c.norm_kind};
}
FfnParams take_ffn(ParamTable& t, const std::string& p, const ModelConfig& c) {
  const bool gate = activation_row(c.activation).gated;
  return {t.get(dotted(p, pn::kW1)),         t.maybe(dotted(p, pn::kB1), c.ffn_bias),
          t.get(dotted(p, pn::kW2)),         t.maybe(dotted(p, pn::kB2), c.ffn_bias),
          t.maybe(dotted(p, pn::kW3), gate), t.maybe(dotted(p, pn::kB3), gate && c.ffn_bias),
          t.quantized(dotted(p, pn::kW1)),   t.quantized(dotted(p, pn::kW2)),
          t.quantized(dotted(p, pn::kW3))};  // an export's; else quantize_weights() makes them
}

// A stack's layers as model/blocks.h lists them.
std::vector<LayerParams> take_layers(ParamTable& t, const StackDesc& stack, const ModelConfig& c) {
  std::vector<LayerParams> layers;
  for (const LayerDesc& desc : stack.layers) {
    LayerParams l;
    for (const SublayerDesc& sub : desc.sublayers) {
      SublayerParams& s = l.sublayers.emplace_back();
      s.kind = sub.kind;
      const std::string p = dotted(desc.path, sub.name);
      if (sub.kind == SublayerKind::FeedForward)
        s.ffn = take_ffn(t, p, c);
      else
        s.attn = take_attention(t, p, c);
      s.norm = take_norm(t, desc.path, sub.norm, c);
    }
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

void pack_layers(std::vector<LayerParams>& layers) {
  for (LayerParams& l : layers)
    for (SublayerParams& s : l.sublayers)
      for (Tensor* w :
           {&s.attn.wq, &s.attn.wk, &s.attn.wv, &s.attn.wo, &s.ffn.w1, &s.ffn.w2, &s.ffn.w3})
        if (w->defined()) *w = packed(*w);
}

// W [in, out] → quantized as [out, in]; the float32 tensor is let go (a checkpoint's is freed
// with the params, a live model's stays its own).
QuantWeight quantized(Tensor& w, ComputeType t) {
  const int64_t in = w.shape()[0], out = w.shape()[1];
  auto q = std::make_shared<const QuantMatrix>(quantize(t, w.data<float>(), out, in, 1, out));
  w = Tensor();
  return q;
}

// Every matrix not already quantized (an export's come quantized).
void quantize_layers(std::vector<LayerParams>& layers, ComputeType t) {
  for (LayerParams& l : layers)
    for (SublayerParams& s : l.sublayers)
      for (auto [w, q] : {std::pair{&s.attn.wq, &s.attn.qwq}, std::pair{&s.attn.wk, &s.attn.qwk},
                          std::pair{&s.attn.wv, &s.attn.qwv}, std::pair{&s.attn.wo, &s.attn.qwo},
                          std::pair{&s.ffn.w1, &s.ffn.qw1}, std::pair{&s.ffn.w2, &s.ffn.qw2},
                          std::pair{&s.ffn.w3, &s.ffn.qw3}})
        if (!*q && w->defined()) *q = quantized(*w, t);
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
size_t layers_bytes(const std::vector<LayerParams>& layers) {
  size_t b = 0;
  for (const LayerParams& l : layers)
    for (const SublayerParams& s : l.sublayers)
      b += matrix_bytes(s.attn.wq, s.attn.qwq) + matrix_bytes(s.attn.wk, s.attn.qwk) +
           matrix_bytes(s.attn.wv, s.attn.qwv) + matrix_bytes(s.attn.wo, s.attn.qwo) +
           matrix_bytes(s.ffn.w1, s.ffn.qw1) + matrix_bytes(s.ffn.w2, s.ffn.qw2) +
           matrix_bytes(s.ffn.w3, s.ffn.qw3);
  return b;
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
  const ModelBlocks blocks = model_blocks(cfg_);
  if (const StackDesc* e = blocks.encoder()) {
    encoder_ = take_layers(table, *e, cfg_);
    encoder_final_ = take_norm(table, e->name, e->final_norm, cfg_);
  }
  decoder_ = take_layers(table, blocks.decoder(), cfg_);
  decoder_final_ = take_norm(table, blocks.decoder().name, blocks.decoder().final_norm, cfg_);
  tied_ = cfg_.tie_output;
  if (!tied_) out_w_ = table.get(dotted(pn::kOutProj, pn::kWeight));  // [C, V]
  if (!tied_) q_out_ = table.quantized(dotted(pn::kOutProj, pn::kWeight));
  out_b_ = table.get(dotted(pn::kOutProj, pn::kBias));  // [V]
  if (compute_ != ComputeType::F32) {
    quantize_weights();
  } else if (layout_ == WeightLayout::Decode) {
    pack_layers(encoder_);
    pack_layers(decoder_);
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
  else if (!q_out_)
    q_out_ = quantized(out_w_, compute_);
  quantize_layers(encoder_, compute_);
  quantize_layers(decoder_, compute_);
}

size_t InferenceModel::weight_bytes() const {
  size_t b = matrix_bytes(embed_, q_embed_);
  if (!tied_ || layout_ == WeightLayout::Decode)
    b += matrix_bytes(out_w_, tied_ ? nullptr : q_out_);
  return b + layers_bytes(encoder_) + layers_bytes(decoder_);
}

const SublayerParams& LayerParams::sublayer(SublayerKind kind) const {
  for (const SublayerParams& s : sublayers)
    if (s.kind == kind) return s;
  fail("LayerParams", "the layer has no sublayer of this kind");
}

InferenceModel InferenceModel::load(const std::string& path, WeightLayout layout,
                                    ComputeType compute) {
  ModelFiles f = read_checkpoint_files(path);
  return InferenceModel(f.cfg, std::move(f.vocab), f.params, f.where, layout, std::move(f.codec),
                        compute);
}

}  // namespace seqtape
