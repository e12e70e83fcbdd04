#pragma once
// A "wide" model for the batching tests (tests/infer): V 54, C 48, 4 heads, F 96, 2 + 2 layers, on
// the Decode layout the CLI and the server load, and inputs of 1 to 11 tokens.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "infer/model.h"
#include "infer/search.h"
#include "nn/transformer.h"
#include "tests/infer/fixtures.h"
#include "tests/test_util.h"

namespace seqtape::test_util {

// The test vocabulary and 40 more characters, so that V is not tiny.
inline Vocab wide_vocab() {
  std::vector<std::string> t = test_util::test_vocab().tokens();
  for (char c = 'c'; c <= 'z'; ++c) t.push_back(std::string(1, c));
  for (char c = 'A'; c <= 'N'; ++c) t.push_back(std::string(1, c));
  return Vocab::from_tokens(t);
}

// C 48, 4 heads, F 96, 2 + 2 layers: wide enough that the matrix products block (several
// rows, several outputs at a time) and that a BLAS gemm and gemv would round differently.
inline ModelConfig wide_config(Arch arch, const Vocab& v, uint64_t seed) {
  ModelConfig c = test_util::tiny_config(arch, v.size(), NormPlacement::Pre, seed, 48);
  c.d_model = 48;
  c.n_heads = 4;
  c.d_ff = 96;
  return c;
}

struct Wide {
  std::unique_ptr<TransformerModel> net;
  std::unique_ptr<InferenceModel> m;
};

// compute: how the decoding model stores its matrices (infer/quant.h).
inline Wide make_wide(Arch arch, uint64_t seed, ComputeType compute = ComputeType::F32) {
  const Vocab v = wide_vocab();
  Wide w;
  w.net = make_model(wide_config(arch, v, seed));
  w.m = std::make_unique<InferenceModel>(w.net->config(), v, test_util::weights_of(*w.net),
                                         "live model", WeightLayout::Decode, nullptr, compute);
  return w;
}

// Inputs of 1 to 11 tokens (the end token, <eos> or <sep>, included).
inline std::vector<std::vector<int32_t>> varied_inputs(Arch arch) {
  const int32_t end = arch == Arch::Seq2Seq ? 2 : 4;
  std::vector<std::vector<int32_t>> in = {{end},
                                          {5, 6, 20, 31, 7, 8, 9, 12, 40, 50, end},
                                          {13, end},
                                          {10, 11, 30, 22, end},
                                          {45, 46, 47, 48, 49, 5, 6, end}};
  return in;
}

// Decoding `in` at once gives every input the tokens, score, stop reason, cache lengths and
// n-best list it gets alone (the scores to the bit).
inline void expect_each_alone(const InferenceModel& m, const std::vector<std::vector<int32_t>>& in,
                              const GenerateOptions& o, const std::string& what) {
  const std::vector<GenerateResult> batch = generate(m, in, o);
  size_t generated = 0;
  for (const GenerateResult& r : batch) generated += r.tokens.size();
  EXPECT_GE(generated, 3 * in.size()) << what << ": too few steps to exercise the batch";
  for (size_t i = 0; i < in.size(); ++i) {
    const GenerateResult alone = generate(m, {in[i]}, o).at(0);
    EXPECT_EQ(batch[i].tokens, alone.tokens) << what << ", input " << i;
    EXPECT_EQ(batch[i].score, alone.score) << what << ", input " << i;  // to the bit
    EXPECT_EQ(batch[i].stop_reason, alone.stop_reason) << what << ", input " << i;
    EXPECT_EQ(batch[i].cache_lengths, alone.cache_lengths) << what << ", input " << i;
    ASSERT_EQ(batch[i].n_best.size(), alone.n_best.size());
    for (size_t k = 0; k < alone.n_best.size(); ++k) {
      EXPECT_EQ(batch[i].n_best[k].tokens, alone.n_best[k].tokens) << what << ", input " << i;
      EXPECT_EQ(batch[i].n_best[k].score, alone.n_best[k].score);
    }
  }
}

}  // namespace seqtape::test_util
