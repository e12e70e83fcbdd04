// parameter_specs: the names of model/param_names.h composed in the models' registration order.
//
// Dimension key: V vocabulary, C d_model, F d_ff, P max_positions.
#include "model/param_names.h"

namespace seqtape {

namespace pn = param_name;

std::string norm_name(int sublayer) {
  return "norm" + std::to_string(sublayer);
}

std::string layer_name(int64_t i) {
  return "layers." + std::to_string(i);
}

std::string stack_layer_path(const char* stack, int64_t i) {
  return std::string(stack) + "." + layer_name(i);
}

namespace {

class SpecList {
 public:
  explicit SpecList(const ModelConfig& c) : c_(c) {}

  void add(const std::string& name, Shape shape) { specs_.push_back({name, std::move(shape)}); }
  void attention(const std::string& p) {
    const int64_t C = c_.d_model;
    for (auto [w, b] : {std::pair{pn::kWq, pn::kBq}, std::pair{pn::kWk, pn::kBk},
                        std::pair{pn::kWv, pn::kBv}, std::pair{pn::kWo, pn::kBo}}) {
      add(p + "." + w, {C, C});
      if (c_.attn_bias) add(p + "." + b, {C});
    }
  }
  void norm(const std::string& p) {
    if (c_.norm == NormPlacement::None) return;
    add(p + "." + pn::kGamma, {c_.d_model});
    add(p + "." + pn::kBeta, {c_.d_model});
  }
  void ffn(const std::string& p) {
    add(p + "." + pn::kW1, {c_.d_model, c_.d_ff});
    if (c_.ffn_bias) add(p + "." + pn::kB1, {c_.d_ff});
    add(p + "." + pn::kW2, {c_.d_ff, c_.d_model});
    if (c_.ffn_bias) add(p + "." + pn::kB2, {c_.d_model});
  }
  // A stack's layers, then its final norm (pre-norm only).
  void stack(const char* name, int64_t layers, bool cross_attention) {
    for (int64_t i = 0; i < layers; ++i) {
      const std::string p = stack_layer_path(name, i) + ".";
      int sublayer = 0;
      attention(p + pn::kSelfAttn);
      norm(p + norm_name(++sublayer));
      if (cross_attention) {
        attention(p + pn::kCrossAttn);
        norm(p + norm_name(++sublayer));
      }
      ffn(p + pn::kFfn);
      norm(p + norm_name(++sublayer));
    }
    if (c_.norm == NormPlacement::Pre) norm(std::string(name) + "." + pn::kFinalNorm);
  }
  std::vector<ParamSpec> take() { return std::move(specs_); }

 private:
  const ModelConfig& c_;
  std::vector<ParamSpec> specs_;
};

}  // namespace

std::vector<ParamSpec> parameter_specs(const ModelConfig& c) {
  SpecList s(c);
  s.add(std::string(pn::kEmbed) + "." + pn::kWeight, {c.vocab_size, c.d_model});
  if (c.pos_encoding == PosEncoding::Learned)
    s.add(std::string(pn::kPos) + "." + pn::kWeight, {c.max_positions, c.d_model});
  const bool s2s = c.arch == Arch::Seq2Seq;
  if (s2s) s.stack(pn::kEncoder, c.n_encoder_layers, false);
  s.stack(pn::kDecoder, c.n_decoder_layers, s2s);
  if (!c.tie_output)
    s.add(std::string(pn::kOutProj) + "." + pn::kWeight, {c.d_model, c.vocab_size});
  s.add(std::string(pn::kOutProj) + "." + pn::kBias, {c.vocab_size});
  return s.take();
}

}  // namespace seqtape
