#pragma once
// ModelConfig: every architectural choice of a model, typed and validated once. Modules read
// these fields directly; nothing below this struct looks an option up by string.
//
// Dimension key (used in nn/ shape comments):
//   B batch, S source length, T target length, C d_model, H heads, Dh = C / H,
//   F d_ff, V vocabulary size, P max_positions.

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "autograd/tensor.h"  // Error

namespace seqtape {

enum class Arch { Seq2Seq, DecoderOnly };
enum class Activation { Relu, Gelu, Tanh };
// Post = the reference's "Add & Norm": x = LN(x + Sub(x)). Pre: x = x + Sub(LN(x)) with a
// final LayerNorm after each stack. None: x = x + Sub(x), no LayerNorm parameters at all.
enum class NormPlacement { Post, Pre, None };
enum class PosEncoding { Sinusoidal, Learned, None };

const char* to_string(Arch a);
const char* to_string(Activation a);
const char* to_string(NormPlacement n);
const char* to_string(PosEncoding p);
// Parse the JSON/CLI spelling ("seq2seq", "relu", "post", "sinusoidal", ...); throws Error
// listing the accepted names.
Arch parse_arch(const std::string& s);
Activation parse_activation(const std::string& s);
NormPlacement parse_norm_placement(const std::string& s);
PosEncoding parse_pos_encoding(const std::string& s);

struct ModelConfig {
  Arch arch = Arch::Seq2Seq;
  int64_t vocab_size = 0;  // V, shared by source and target
  int64_t d_model = 64;    // C
  int64_t n_heads = 4;     // H, must divide d_model
  int64_t n_encoder_layers = 2;
  int64_t n_decoder_layers = 2;
  int64_t d_ff = 256;  // F
  Activation activation = Activation::Relu;
  NormPlacement norm = NormPlacement::Post;
  PosEncoding pos_encoding = PosEncoding::Sinusoidal;
  double pe_base = 10000.0;  // sinusoidal: angle = p / pe_base^(2i/C)
  double dropout = 0.0;
  bool tie_output = false;  // out_proj uses embed.weight transposed
  int64_t max_positions = 256;
  double layer_norm_eps = 1e-5;
  bool ffn_bias = true;
  bool attn_bias = true;
  uint64_t init_seed = 0;

  // Throws Error naming the offending field and its value.
  void validate() const;

  // Every field, enums as their string names.
  nlohmann::json to_json() const;
  // Missing keys keep their defaults; unknown keys, wrong types and bad enum names are errors
  // naming the key. The result is validated.
  static ModelConfig from_json(const nlohmann::json& j);
};

// Named configurations; unknown name → Error listing the known ones.
//   seed    the reference model: Seq2Seq, C 4, H 1, 2+2 layers, F 16, relu, post-norm,
//           sinusoidal PE base 100, dropout 0
//   default copy-task model: Seq2Seq, C 64, H 4, 2+2 layers, F 256, relu, post, base 10000
//   small   same sizes as default (C 64, H 4, 2+2, F 256)
//   medium  Seq2Seq, C 256, H 4, 3+3 layers, F 1024
//   lm      DecoderOnly, C 64, H 4, 2 decoder layers, F 256
ModelConfig preset(const std::string& name, int vocab_size);
std::vector<std::string> preset_names();

}  // namespace seqtape
