// model/blocks.h: the one description of a model's structure, and what derives from it.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/blocks.h"
#include "model/memory_budget.h"

namespace seqtape {
namespace {

ModelConfig tiny(Arch arch, NormPlacement norm) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 9;
  c.d_model = 4;
  c.n_heads = 2;
  c.n_encoder_layers = arch == Arch::Seq2Seq ? 2 : 0;
  c.n_decoder_layers = 3;
  c.d_ff = 6;
  c.norm = norm;
  c.max_positions = 12;
  return c;
}

// "self_attn/norm1 ffn/norm2" for a layer.
std::string sublayers_of(const LayerDesc& l) {
  std::string s;
  for (const SublayerDesc& d : l.sublayers) s += (s.empty() ? "" : " ") + d.name + "/" + d.norm;
  return s;
}

TEST(ModelBlocks, Seq2SeqDecoderLayersAttendToTheEncoderBetweenSelfAttentionAndFfn) {
  const ModelBlocks b = model_blocks(tiny(Arch::Seq2Seq, NormPlacement::Post));
  ASSERT_EQ(b.stacks.size(), 2u);
  ASSERT_NE(b.encoder(), nullptr);
  EXPECT_EQ(b.encoder()->name, "encoder");
  ASSERT_EQ(b.encoder()->layers.size(), 2u);
  EXPECT_EQ(b.encoder()->layers[1].path, "encoder.layers.1");
  EXPECT_EQ(sublayers_of(b.encoder()->layers[1]), "self_attn/norm1 ffn/norm2");
  ASSERT_EQ(b.decoder().layers.size(), 3u);
  EXPECT_EQ(sublayers_of(b.decoder().layers[2]), "self_attn/norm1 cross_attn/norm2 ffn/norm3");
  EXPECT_EQ(b.decoder().layers[2].sublayers[1].kind, SublayerKind::CrossAttention);
  EXPECT_EQ(b.decoder().final_norm, "");  // post-norm: none after the stack
}

TEST(ModelBlocks, DecoderOnlyPreNormHasFinalNormAndNoCrossAttention) {
  const ModelBlocks b = model_blocks(tiny(Arch::DecoderOnly, NormPlacement::Pre));
  EXPECT_EQ(b.encoder(), nullptr);
  EXPECT_EQ(sublayers_of(b.decoder().layers[0]), "self_attn/norm1 ffn/norm2");
  EXPECT_EQ(b.decoder().final_norm, "final_norm");
  EXPECT_EQ(b.placement, NormPlacement::Pre);
}

TEST(ModelBlocks, NormPlacementNoneHasNoNorms) {
  const ModelBlocks b = model_blocks(tiny(Arch::Seq2Seq, NormPlacement::None));
  EXPECT_EQ(sublayers_of(b.decoder().layers[0]), "self_attn/ cross_attn/ ffn/");
  EXPECT_TRUE(norm_params(tiny(Arch::Seq2Seq, NormPlacement::None)).empty());
}

// The memory budget counts the same parameters the name list holds, for every variant.
TEST(ModelBlocks, ParameterCountIsTheSumOfTheParameterList) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly})
    for (NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre, NormPlacement::None})
      for (bool tie : {false, true})
        for (bool bias : {false, true}) {
          ModelConfig c = tiny(arch, norm);
          c.tie_output = tie;
          c.attn_bias = c.ffn_bias = bias;
          c.pos_encoding = bias ? PosEncoding::Learned : PosEncoding::Sinusoidal;
          uint64_t n = 0;
          for (const ParamSpec& p : parameter_specs(c)) {
            uint64_t e = 1;
            for (int64_t d : p.shape) e *= static_cast<uint64_t>(d);
            n += e;
          }
          EXPECT_EQ(parameter_count(c), n) << to_string(arch) << " " << to_string(norm);
        }
}

}  // namespace
}  // namespace seqtape
