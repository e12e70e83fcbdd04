#pragma once
// Shared by the infer tests: the test vocabulary, a tiny model configuration, and the named
// weights of a live training model.

#include <cstdint>
#include <vector>

#include "io/checkpoint.h"  // NamedTensor
#include "model/config.h"
#include "nn/transformer.h"
#include "text/tokenizer.h"  // Vocab

namespace seqtape::test_util {

inline Vocab test_vocab() {
  return Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "<sep>", "今", "天", "气", "很",
                             "好", "学习", "！", "a", "b"});
}

// C 8, 2 heads, 2 decoder layers (+2 encoder layers for Seq2Seq), F 16, PE base 100.
inline ModelConfig tiny_config(Arch arch, int64_t vocab_size, NormPlacement norm, uint64_t seed,
                               int64_t max_positions) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = vocab_size;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_encoder_layers = arch == Arch::Seq2Seq ? 2 : 0;
  c.n_decoder_layers = 2;
  c.d_ff = 16;
  c.norm = norm;
  c.max_positions = max_positions;
  c.pe_base = 100.0;
  c.init_seed = seed;
  return c;
}

inline std::vector<NamedTensor> weights_of(const TransformerModel& net) {
  std::vector<NamedTensor> out;
  for (auto& [name, p] : net.named_parameters()) out.push_back({name, p.value()});
  return out;
}

}  // namespace seqtape::test_util
