// model_blocks(): the layer sequence and each part's parameters, from the configuration.
//
// Dimension key: V vocabulary, C d_model, F d_ff, P max_positions.
#include "model/blocks.h"

namespace seqtape {

namespace pn = param_name;

const StackDesc* ModelBlocks::encoder() const {
  return stacks.size() == 2 ? &stacks.front() : nullptr;
}

const StackDesc& ModelBlocks::decoder() const {
  return stacks.back();
}

std::string dotted(const std::string& parent, const std::string& leaf) {
  return parent + "." + leaf;
}

StackDesc stack_blocks(const ModelConfig& c, const char* stack) {
  const bool encoder = std::string(stack) == pn::kEncoder;
  // A seq2seq decoder layer attends to the encoder between its self-attention and its FFN.
  const bool cross = !encoder && c.arch == Arch::Seq2Seq;
  const bool normed = c.norm != NormPlacement::None;
  StackDesc s{stack, {}, c.norm == NormPlacement::Pre ? pn::kFinalNorm : ""};
  for (int64_t i = 0, n = encoder ? c.n_encoder_layers : c.n_decoder_layers; i < n; ++i) {
    LayerDesc l{stack_layer_path(stack, i), {}};
    // Each sublayer's norm is numbered by its place: the FFN's is norm3 after a cross-attention
    // block and norm2 without one.
    auto add = [&](SublayerKind kind, const char* name) {
      const int k = static_cast<int>(l.sublayers.size()) + 1;
      l.sublayers.push_back({kind, name, normed ? norm_name(k) : ""});
    };
    add(SublayerKind::SelfAttention, pn::kSelfAttn);
    if (cross) add(SublayerKind::CrossAttention, pn::kCrossAttn);
    add(SublayerKind::FeedForward, pn::kFfn);
    s.layers.push_back(std::move(l));
  }
  return s;
}

ModelBlocks model_blocks(const ModelConfig& c) {
  ModelBlocks b;
  b.placement = c.norm;
  b.activation = c.activation;
  if (c.arch == Arch::Seq2Seq) b.stacks.push_back(stack_blocks(c, pn::kEncoder));
  b.stacks.push_back(stack_blocks(c, pn::kDecoder));
  return b;
}

std::vector<ParamSpec> sublayer_params(const ModelConfig& c, SublayerKind kind) {
  const int64_t C = c.d_model, F = c.d_ff;
  std::vector<ParamSpec> p;
  if (kind == SublayerKind::FeedForward) {
    p.push_back({pn::kW1, {C, F}});
    if (c.ffn_bias) p.push_back({pn::kB1, {F}});
    p.push_back({pn::kW2, {F, C}});
    if (c.ffn_bias) p.push_back({pn::kB2, {C}});
    if (activation_row(c.activation).gated) {
      p.push_back({pn::kW3, {C, F}});
      if (c.ffn_bias) p.push_back({pn::kB3, {F}});
    }
    return p;
  }
  for (auto [w, b] : {std::pair{pn::kWq, pn::kBq}, std::pair{pn::kWk, pn::kBk},
                      std::pair{pn::kWv, pn::kBv}, std::pair{pn::kWo, pn::kBo}}) {
    p.push_back({w, {C, C}});
    if (c.attn_bias) p.push_back({b, {C}});
  }
  return p;
}

std::vector<ParamSpec> norm_params(const ModelConfig& c) {
  if (c.norm == NormPlacement::None) return {};
  if (!norm_kind_row(c.norm_kind).beta) return {{pn::kGamma, {c.d_model}}};
  return {{pn::kGamma, {c.d_model}}, {pn::kBeta, {c.d_model}}};
}

}  // namespace seqtape
