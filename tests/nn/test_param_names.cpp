// model/param_names.h: the one parameter list, against what the modules register.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/param_names.h"
#include "nn/transformer.h"

namespace seqtape {
namespace {

ModelConfig tiny(Arch arch, NormPlacement norm) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 9;
  c.d_model = 4;
  c.n_heads = 2;
  c.n_encoder_layers = arch == Arch::Seq2Seq ? 2 : 0;
  c.n_decoder_layers = 2;
  c.d_ff = 6;
  c.norm = norm;
  c.max_positions = 12;
  return c;
}

TEST(ParamNames, ListMatchesEveryModelVariantInOrderAndShape) {
  int variants = 0;
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly})
    for (NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre, NormPlacement::None})
      for (PosEncoding pos : {PosEncoding::Sinusoidal, PosEncoding::Learned, PosEncoding::None})
        for (bool tie : {false, true})
          for (bool bias : {false, true}) {
            ModelConfig c = tiny(arch, norm);
            c.pos_encoding = pos;
            c.tie_output = tie;
            c.attn_bias = c.ffn_bias = bias;
            const auto specs = parameter_specs(c);
            const auto model = make_model(c);
            const auto params = model->named_parameters();
            ASSERT_EQ(specs.size(), params.size()) << c.to_json().dump();
            for (size_t i = 0; i < specs.size(); ++i) {
              EXPECT_EQ(specs[i].name, params[i].first) << i;
              EXPECT_EQ(specs[i].shape, params[i].second.shape()) << specs[i].name;
            }
            ++variants;
          }
  EXPECT_EQ(variants, 72);
}

TEST(ParamNames, SpellsTheDocumentedNames) {
  const auto specs = parameter_specs(tiny(Arch::Seq2Seq, NormPlacement::Pre));
  std::vector<std::string> names;
  for (const auto& s : specs) names.push_back(s.name);
  auto has = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  EXPECT_EQ(names.front(), "embed.weight");
  EXPECT_TRUE(has("encoder.layers.1.self_attn.bo"));
  EXPECT_TRUE(has("encoder.layers.0.norm2.gamma"));
  EXPECT_TRUE(has("encoder.final_norm.beta"));
  EXPECT_TRUE(has("decoder.layers.1.cross_attn.wk"));
  EXPECT_TRUE(has("decoder.layers.1.norm3.gamma"));  // the FFN's norm after cross-attention
  EXPECT_FALSE(has("encoder.layers.0.norm3.gamma"));
  EXPECT_EQ(names.back(), "out_proj.bias");
  EXPECT_EQ(specs.back().shape, (Shape{9}));

  const auto lm = parameter_specs(tiny(Arch::DecoderOnly, NormPlacement::Post));
  for (const auto& s : lm) {
    EXPECT_EQ(s.name.find("encoder"), std::string::npos) << s.name;
    EXPECT_EQ(s.name.find("cross_attn"), std::string::npos) << s.name;
    EXPECT_EQ(s.name.find("norm3"), std::string::npos) << s.name;
  }
  EXPECT_EQ(stack_layer_path(param_name::kDecoder, 3), "decoder.layers.3");
  EXPECT_EQ(norm_name(2), "norm2");
}

// The model interface: loss on a batch and greedy decoding, without knowing the architecture.
TEST(ModelInterface, LossOnABatchEqualsCrossEntropyOfTheLogits) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    auto model = make_model(tiny(arch, NormPlacement::Post));
    model->set_training(false);
    Batch b;
    b.B = 2;
    b.S = 3;
    b.T = 3;
    b.src = b.tgt_in = b.tokens = {3, 4, 5, 6, 7, 0};
    b.src_len = b.tgt_len = b.len = {3, 2};
    b.labels = {4, 5, 6, 7, 8, kIgnoreIndex};
    Rng rng(0);
    const Var logits = model->logits(b, rng);
    EXPECT_EQ(logits.shape(), (Shape{2, 3, 9}));
    const double direct = model->loss(b, rng).item();
    EXPECT_GT(direct, 0.0);
    EXPECT_DOUBLE_EQ(direct, model->loss(b, rng).item());  // evaluation mode: deterministic
  }
}

TEST(ModelInterface, GreedyUncachedRestoresTrainingModeAndStopsAtMaxNew) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    auto model = make_model(tiny(arch, NormPlacement::Post));
    model->set_training(true);
    const SpecialIds ids{1, 2, 0};
    const auto got = model->greedy_uncached({{3, 4, 2}, {5, 2}}, ids, 4);
    ASSERT_EQ(got.size(), 2u);
    for (const auto& g : got) {
      EXPECT_LE(g.size(), 4u);
      for (int32_t t : g) EXPECT_NE(t, ids.eos);
    }
    EXPECT_TRUE(model->training());
    EXPECT_TRUE(model->greedy_uncached({}, ids, 4).empty());
    EXPECT_TRUE(model->training());
  }
}

}  // namespace
}  // namespace seqtape
