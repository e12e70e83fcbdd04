#pragma once
// Parameter names: the one place that spells them. The nn/ modules register under these names;
// parameter_specs(cfg) composes them into the full list a configuration implies. Checkpoint
// loading (train/model_io.h), infer/ and export check weights against that list. Tape-free
// (model/), so infer/ can read it.
//
// Dimension key: V vocabulary, C d_model, F d_ff, P max_positions.
//
// The list (Module::named_parameters of a model gives exactly this, in this order):
//   embed.weight [V, C]                   shared by source and target
//   pos.weight [P, C]                     learned PE only
//   encoder.layers.N.self_attn.{wq,bq,wk,bk,wv,bv,wo,bo}   w [C, C], b [C] (b with attn_bias)
//   encoder.layers.N.norm1.{gamma,beta}   [C], after self-attention (not with norm none)
//   encoder.layers.N.ffn.{w1,b1,w2,b2}    w1 [C, F], b1 [F], w2 [F, C], b2 [C] (b with ffn_bias)
//   encoder.layers.N.ffn.{w3,b3}          w3 [C, F], b3 [F]: gated activations only
//   encoder.layers.N.norm2.{gamma,beta}   after the FFN
//   encoder.final_norm.{gamma,beta}       pre-norm only
//   decoder.layers.N.self_attn.*, norm1, cross_attn.*, norm2, ffn.*, norm3
//     (decoder-only: self_attn, norm1, ffn, norm2 — no cross-attention)
//   decoder.final_norm.{gamma,beta}       pre-norm only
//   out_proj.weight [C, V]                absent when tie_output (embed.weight transposed)
//   out_proj.bias [V]

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "tensor/tensor.h"

namespace seqtape {

namespace param_name {
// Parts of a model.
inline constexpr char kEmbed[] = "embed";
inline constexpr char kPos[] = "pos";
inline constexpr char kEncoder[] = "encoder";
inline constexpr char kDecoder[] = "decoder";
inline constexpr char kFinalNorm[] = "final_norm";
inline constexpr char kOutProj[] = "out_proj";
// Parts of a layer (its norms: norm_name).
inline constexpr char kSelfAttn[] = "self_attn";
inline constexpr char kCrossAttn[] = "cross_attn";
inline constexpr char kFfn[] = "ffn";
// Leaves: Linear, Embedding and learned positions; LayerNorm; attention; feed-forward.
inline constexpr char kWeight[] = "weight";
inline constexpr char kBias[] = "bias";
inline constexpr char kGamma[] = "gamma";
inline constexpr char kBeta[] = "beta";
inline constexpr char kWq[] = "wq", kBq[] = "bq", kWk[] = "wk", kBk[] = "bk";
inline constexpr char kWv[] = "wv", kBv[] = "bv", kWo[] = "wo", kBo[] = "bo";
inline constexpr char kW1[] = "w1", kB1[] = "b1", kW2[] = "w2", kB2[] = "b2";
inline constexpr char kW3[] = "w3", kB3[] = "b3";  // a gated activation's gate
}  // namespace param_name

// The LayerNorm after a layer's k-th residual sublayer (k from 1): "norm1", "norm2", "norm3".
// So a decoder layer's FFN norm is norm3 after a cross-attention block and norm2 without one.
std::string norm_name(int sublayer);
// Relative path of layer i of a stack: "layers.3". stack_layer_path("decoder", 3) is
// "decoder.layers.3".
std::string layer_name(int64_t i);
std::string stack_layer_path(const char* stack, int64_t i);

struct ParamSpec {
  std::string name;  // dotted path from the model root
  Shape shape;
};

// Every parameter a (valid) configuration implies, in the model's registration order.
std::vector<ParamSpec> parameter_specs(const ModelConfig& cfg);

}  // namespace seqtape
