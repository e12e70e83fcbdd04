// Quantized exports (`seqtape export --compute-type int8|bf16`, infer/quant_io.h): loading one
// gives the matrices that --compute-type quantizes from the float32 checkpoint, held without a
// float32 copy, and decodes the same tokens and scores; the files are about 4x / 2x smaller.

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "infer/export.h"
#include "infer/load.h"
#include "infer/quant_io.h"
#include "io/safetensors.h"
#include "tests/infer/wide_model.h"

namespace seqtape {
namespace {

namespace fs = std::filesystem;
using test_util::varied_inputs;
using test_util::wide_config;
using test_util::wide_vocab;

// A checkpoint of the wide model (a tied output projection when `tied`; C 128 and F 512 when
// `wider`), in dir/run.
std::string wide_checkpoint(const test_util::TempDir& dir, Arch arch, bool tied,
                            bool wider = false) {
  const Vocab v = wide_vocab();
  ModelConfig cfg = wide_config(arch, v, 11);
  cfg.tie_output = tied;
  if (wider) {
    cfg.d_model = 128;
    cfg.d_ff = 512;
  }
  auto net = make_model(cfg);
  Checkpoint c;
  c.config_json = net->config().to_json().dump();
  c.vocab = v.tokens();
  c.params = test_util::weights_of(*net);
  fs::create_directories(dir.path() / "run");
  const std::string ck = dir.file("run/checkpoint.bin");
  save_checkpoint(ck, c);
  return ck;
}

void expect_same_matrix(const QuantWeight& a, const QuantWeight& b, const std::string& what) {
  ASSERT_TRUE(a && b) << what;
  EXPECT_EQ(a->out, b->out) << what;
  EXPECT_EQ(a->in, b->in) << what;
  EXPECT_EQ(a->q, b->q) << what;
  EXPECT_EQ(a->scale, b->scale) << what;
  EXPECT_EQ(a->sum, b->sum) << what;
  EXPECT_EQ(a->bf16, b->bf16) << what;
}

void expect_same_attention(const AttnParams& a, const AttnParams& b, const std::string& what) {
  expect_same_matrix(a.qwq, b.qwq, what + " wq");
  expect_same_matrix(a.qwk, b.qwk, what + " wk");
  expect_same_matrix(a.qwv, b.qwv, what + " wv");
  expect_same_matrix(a.qwo, b.qwo, what + " wo");
  for (const Tensor* w : {&a.wq, &a.wk, &a.wv, &a.wo}) EXPECT_FALSE(w->defined()) << what;
}

// Every matrix of `got` (from the export) is the one `want` quantized from the checkpoint.
void expect_same_matrices(const InferenceModel& got, const InferenceModel& want,
                          const std::string& what) {
  expect_same_matrix(got.quant_embed(), want.quant_embed(), what + " embedding");
  expect_same_matrix(got.quant_out_weight(), want.quant_out_weight(), what + " output");
  EXPECT_FALSE(got.embed().defined()) << what;
  auto same_layers = [&](const std::vector<LayerParams>& g, const std::vector<LayerParams>& w,
                         const std::string& stack) {
    ASSERT_EQ(g.size(), w.size()) << what;
    for (size_t i = 0; i < w.size(); ++i)
      for (size_t k = 0; k < w[i].sublayers.size(); ++k) {
        const SublayerParams &gs = g[i].sublayers[k], &ws = w[i].sublayers[k];
        const std::string at =
            what + " " + stack + " layer " + std::to_string(i) + " sublayer " + std::to_string(k);
        if (ws.kind == SublayerKind::FeedForward) {
          expect_same_matrix(gs.ffn.qw1, ws.ffn.qw1, at + " w1");
          expect_same_matrix(gs.ffn.qw2, ws.ffn.qw2, at + " w2");
          if (gs.ffn.qw3 || ws.ffn.qw3) expect_same_matrix(gs.ffn.qw3, ws.ffn.qw3, at + " w3");
        } else {
          expect_same_attention(gs.attn, ws.attn, at);
        }
      }
  };
  same_layers(got.encoder_layers(), want.encoder_layers(), "encoder");
  same_layers(got.decoder_layers(), want.decoder_layers(), "decoder");
  EXPECT_EQ(got.weight_bytes(), want.weight_bytes()) << what;
}

TEST(QuantExport, LoadsWhatTheComputeTypeQuantizesAndDecodesTheSame) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly})
    for (ComputeType t : {ComputeType::Int8, ComputeType::Bf16}) {
      const bool tied = arch == Arch::DecoderOnly;
      const std::string what =
          std::string(to_string(arch)) + " " + to_string(t) + (tied ? " tied" : "");
      test_util::TempDir dir("quant_export");
      const std::string ck = wide_checkpoint(dir, arch, tied);
      export_checkpoint(ck, dir.file("exp"), t);
      // The files hold no float32 copy of a quantized matrix: those come as int8 or bf16 only.
      ModelFiles f = read_model_files(dir.file("exp"));
      EXPECT_EQ(f.compute, t) << what;
      for (const NamedTensor& p : f.params) {
        EXPECT_FALSE(is_quantized_matrix(p.name)) << what << ": " << p.name;
        EXPECT_EQ(p.value.dtype(), DType::F32) << what << ": " << p.name;
      }
      EXPECT_EQ(f.quantized.count("embed.weight"), 1u) << what;
      const InferenceModel got = model_from_files(std::move(f), WeightLayout::Decode, t);
      const InferenceModel want = load_model(ck, WeightLayout::Decode, t);
      expect_same_matrices(got, want, what);
      EXPECT_EQ(got.parameter_count(), want.parameter_count()) << what;
      for (int beam : {1, 4}) {
        GenerateOptions o;
        o.max_new = 12;
        o.beam = beam;
        const auto in = varied_inputs(arch);
        const auto a = generate(got, in, o), b = generate(want, in, o);
        for (size_t i = 0; i < in.size(); ++i) {
          EXPECT_EQ(a[i].tokens, b[i].tokens) << what << " beam " << beam << " input " << i;
          EXPECT_EQ(a[i].score, b[i].score) << what << " beam " << beam << " input " << i;
        }
      }
    }
}

TEST(QuantExport, FilesAreAbout4xAnd2xSmaller) {
  test_util::TempDir dir("quant_size");
  const std::string ck = wide_checkpoint(dir, Arch::Seq2Seq, false, true);
  auto size_of = [&](const char* name, ComputeType t) {
    export_checkpoint(ck, dir.file(name), t);
    return double(fs::file_size(dir.path() / name / "model.safetensors"));
  };
  const double f32 = size_of("f32", ComputeType::F32), int8 = size_of("int8", ComputeType::Int8),
               bf16 = size_of("bf16", ComputeType::Bf16);
  std::printf("model.safetensors: f32 %.0f, int8 %.0f (%.3f), bf16 %.0f (%.3f) bytes\n", f32, int8,
              int8 / f32, bf16, bf16 / f32);
  // int8: a byte per weight, plus a float32 scale per output (In 128 or 512), the float32
  // biases and norms and the header; bf16: two bytes per weight.
  EXPECT_GT(int8 / f32, 0.25);
  EXPECT_LT(int8 / f32, 0.27);
  EXPECT_GT(bf16 / f32, 0.50);
  EXPECT_LT(bf16 / f32, 0.51);
  // The f32 export is what it always was: no compute type, nothing but F32.
  const SafetensorsFile plain = read_safetensors(dir.file("f32/model.safetensors"));
  EXPECT_EQ(plain.metadata.count(kComputeTypeKey), 0u);
  EXPECT_TRUE(plain.stored.empty());
  EXPECT_EQ(read_safetensors(dir.file("int8/model.safetensors")).metadata.at(kComputeTypeKey),
            "int8");
}

TEST(QuantExport, DecodesOnlyAsItsOwnType) {
  test_util::TempDir dir("quant_type");
  const std::string ck = wide_checkpoint(dir, Arch::Seq2Seq, false);
  export_checkpoint(ck, dir.file("exp"), ComputeType::Int8);
  EXPECT_EQ(load_model(dir.file("exp")).compute_type(), ComputeType::Int8);
  EXPECT_EQ(load_model(ck).compute_type(), ComputeType::F32);
  EXPECT_ERROR_HAS(
      load_model(dir.file("exp"), WeightLayout::Decode, ComputeType::Bf16),
      "model.safetensors: is an export quantized as int8: it decodes as int8, not bf16");
  EXPECT_ERROR_HAS(export_checkpoint(ck, dir.file("auto"), ComputeType::Auto),
                   "compute type auto names no stored type");
}

}  // namespace
}  // namespace seqtape
