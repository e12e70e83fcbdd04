// infer/ against nn/: the same weights give the same logits (teacher forced), the cached step
// gives the uncached recompute's logits at every position, the processed/selected bookkeeping
// matches the reference walk-through, and bad weights or checkpoints are clear errors.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "autograd/tape.h"
#include "infer/model.h"
#include "infer/search.h"
#include "infer/session.h"
#include "io/checkpoint.h"
#include "tensor/kernels.h"
#include "tests/infer/fixtures.h"
#include "tests/test_util.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

namespace fs = std::filesystem;

using test_util::test_vocab;
using test_util::weights_of;

ModelConfig small_config(Arch arch, NormPlacement norm, uint64_t seed = 7) {
  return test_util::tiny_config(arch, test_vocab().size(), norm, seed, /*max_positions=*/24);
}

// Training layout: a view of the live model's weights. Decode layout (what load() gives):
// every matrix packed into owned strips (kernels::pack_strips).
InferenceModel view_of(const TransformerModel& net, WeightLayout layout = WeightLayout::Training) {
  return InferenceModel(net.config(), test_vocab(), weights_of(net), "live model", layout);
}
const WeightLayout kLayouts[] = {WeightLayout::Training, WeightLayout::Decode};
const char* name_of(WeightLayout l) {
  return l == WeightLayout::Decode ? "decode layout" : "training layout";
}

double max_diff(const float* a, const float* b, int64_t n) {
  double d = 0;
  for (int64_t i = 0; i < n; ++i)
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return d;
}

// Float32 rounding is relative: 1e-5 for logits up to 10 in magnitude, 1e-6 of the largest
// beyond (the norm-free variants' logits reach the hundreds).
double logit_tolerance(double max_abs_logit) {
  return 1e-6 * std::max(10.0, max_abs_logit);
}
double max_abs(const float* a, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i])));
  return m;
}

// ---- logits: infer == training, teacher forced ---------------------------------------------

struct Variant {
  const char* name;
  NormPlacement norm;
  Activation act;
  PosEncoding pos;
  bool tie;
};
const Variant kVariants[] = {
    {"post", NormPlacement::Post, Activation::Relu, PosEncoding::Sinusoidal, false},
    {"pre", NormPlacement::Pre, Activation::Gelu, PosEncoding::Learned, false},
    {"none_tied", NormPlacement::None, Activation::Tanh, PosEncoding::None, true},
};

TEST(InferLogits, Seq2SeqMatchesTrainingForwardOnPaddedBatch) {
  for (WeightLayout layout : kLayouts)
    for (const Variant& v : kVariants) {
      SCOPED_TRACE(std::string(v.name) + ", " + name_of(layout));
      ModelConfig cfg = small_config(Arch::Seq2Seq, v.norm);
      cfg.activation = v.act;
      cfg.pos_encoding = v.pos;
      cfg.tie_output = v.tie;
      cfg.attn_bias = !v.tie;  // exercise the bias-free projections too
      auto net = make_model(cfg);
      net->set_training(false);
      InferenceModel m = view_of(*net, layout);
      EXPECT_TRUE(m.embed().same_storage(net->parameter("embed.weight").value()));  // a view
      const Tensor& wq = m.decoder_layers()[0].sublayer(SublayerKind::SelfAttention).attn.wq;
      const Tensor& live_wq = net->parameter("decoder.layers.0.self_attn.wq").value();
      EXPECT_EQ(wq.same_storage(live_wq), layout == WeightLayout::Training);
      if (layout == WeightLayout::Decode) {  // packed: strip 0, input i, output o at i·32 + o
        EXPECT_EQ(wq.data<float>()[2 * kernels::kPackStrip + 1], live_wq.data<float>()[2 * 8 + 1]);
      }

      // Two sources of different lengths, two target prefixes of different lengths.
      const std::vector<std::vector<int32_t>> src = {{5, 6, 6, 7, 8, 9, 2}, {12, 13, 2}};
      const std::vector<std::vector<int32_t>> tgt = {{1, 5, 6, 6, 7}, {1, 12, 13}};
      const int64_t B = 2, S = 7, T = 5, V = cfg.vocab_size;
      std::vector<int32_t> src_flat(B * S, 0), tgt_flat(B * T, 0), src_len, tgt_len;
      for (int64_t b = 0; b < B; ++b) {
        std::copy(src[b].begin(), src[b].end(), src_flat.begin() + b * S);
        std::copy(tgt[b].begin(), tgt[b].end(), tgt_flat.begin() + b * T);
        src_len.push_back(static_cast<int32_t>(src[b].size()));
        tgt_len.push_back(static_cast<int32_t>(tgt[b].size()));
      }
      NoGradGuard no_grad;
      Rng rng(0);
      auto& s2s = dynamic_cast<Seq2Seq&>(*net);
      Tensor ref = s2s.forward(src_flat, B, S, src_len, tgt_flat, T, tgt_len, rng).value();

      DecodeSession sess(m);
      sess.begin(src, {0, 1}, T);
      const std::vector<int32_t> rows = {0, 1};
      const float* got = sess.prefill(rows, tgt, /*all_positions=*/true);  // [5 + 3, V]
      int64_t j = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < tgt_len[b]; ++t, ++j)
          EXPECT_LT(max_diff(got + j * V, ref.data<float>() + (b * T + t) * V, V),
                    logit_tolerance(max_abs(ref.data<float>() + (b * T + t) * V, V)))
              << "row " << b << " position " << t;
    }
}

TEST(InferLogits, DecoderOnlyMatchesTrainingForwardOnPaddedBatch) {
  for (WeightLayout layout : kLayouts)
    for (NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre}) {
      SCOPED_TRACE(name_of(layout));
      ModelConfig cfg = small_config(Arch::DecoderOnly, norm);
      auto net = make_model(cfg);
      net->set_training(false);
      InferenceModel m = view_of(*net, layout);
      const std::vector<std::vector<int32_t>> seq = {{5, 6, 4, 6, 7, 9}, {12, 4, 13}};
      const int64_t B = 2, T = 6, V = cfg.vocab_size;
      std::vector<int32_t> flat(B * T, 0), len;
      for (int64_t b = 0; b < B; ++b) {
        std::copy(seq[b].begin(), seq[b].end(), flat.begin() + b * T);
        len.push_back(static_cast<int32_t>(seq[b].size()));
      }
      NoGradGuard no_grad;
      Rng rng(0);
      Tensor ref = dynamic_cast<DecoderOnly&>(*net).forward(flat, B, T, len, rng).value();
      DecodeSession sess(m);
      sess.begin({}, {0, 1}, T);
      const std::vector<int32_t> rows = {0, 1};
      const float* got = sess.prefill(rows, seq, true);
      int64_t j = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < len[b]; ++t, ++j)
          EXPECT_LT(max_diff(got + j * V, ref.data<float>() + (b * T + t) * V, V), 1e-5);
    }
}

// ---- cached == uncached at every step ------------------------------------------------------

// Feeds `path` one token per step to a cached session and compares every step's logits with
// the uncached session and with one all-positions prefill of the whole path.
void check_teacher_forced_steps(const InferenceModel& m, const std::vector<int32_t>& prompt,
                                const std::vector<int32_t>& path) {
  const int64_t V = m.config().vocab_size;
  const std::vector<int32_t> row = {0};
  std::vector<std::vector<int32_t>> src =
      m.seq2seq() ? std::vector<std::vector<int32_t>>{prompt} : std::vector<std::vector<int32_t>>{};
  const std::vector<int32_t> first = m.seq2seq() ? std::vector<int32_t>{1} : prompt;
  DecodeSession cached(m), uncached(m, CacheMode::Uncached), full(m);
  const int64_t cap = static_cast<int64_t>(first.size() + path.size());
  cached.begin(src, {0}, cap);
  uncached.begin(src, {0}, cap);
  full.begin(src, {0}, cap);
  std::vector<int32_t> whole = first;
  whole.insert(whole.end(), path.begin(), path.end());
  std::vector<float> all(static_cast<size_t>(static_cast<int64_t>(whole.size()) * V));
  const float* f = full.prefill(row, {whole}, true);
  std::copy(f, f + all.size(), all.begin());

  const float* a = cached.prefill(row, {first});
  const float* b = uncached.prefill(row, {first});
  int64_t pos = static_cast<int64_t>(first.size()) - 1;
  EXPECT_LT(max_diff(a, b, V), 1e-5);
  EXPECT_LT(max_diff(a, all.data() + pos * V, V), 1e-5);
  for (int32_t t : path) {
    ++pos;
    a = cached.step(row, std::span<const int32_t>(&t, 1));
    b = uncached.step(row, std::span<const int32_t>(&t, 1));
    EXPECT_LT(max_diff(a, b, V), 1e-5) << "position " << pos;
    EXPECT_LT(max_diff(a, all.data() + pos * V, V), 1e-5) << "position " << pos;
    EXPECT_EQ(cached.length(0), pos + 1);
    EXPECT_EQ(uncached.length(0), pos + 1);
  }
}

TEST(InferCache, CachedEqualsUncachedAlongTeacherForcedPath) {
  for (WeightLayout layout : kLayouts)
    for (NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre}) {
      SCOPED_TRACE(name_of(layout));
      auto s2s = make_model(small_config(Arch::Seq2Seq, norm));
      check_teacher_forced_steps(view_of(*s2s, layout), {5, 6, 6, 7, 8, 9, 2},
                                 {5, 6, 6, 7, 8, 9, 2});
      auto lm = make_model(small_config(Arch::DecoderOnly, norm));
      check_teacher_forced_steps(view_of(*lm, layout), {5, 6, 4}, {6, 7, 7, 12, 13, 2});
    }
}

TEST(InferCache, CachedEqualsUncachedAlongGreedyPath) {
  for (WeightLayout layout : kLayouts)
    for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly})
      for (NormPlacement norm : {NormPlacement::Post, NormPlacement::Pre, NormPlacement::None}) {
        SCOPED_TRACE(std::string(name_of(layout)) +
                     (arch == Arch::Seq2Seq ? " seq2seq" : " decoder-only") + " norm " +
                     std::to_string(int(norm)));
        auto net = make_model(small_config(arch, norm, 11));
        InferenceModel m = view_of(*net, layout);
        GenerateOptions o;
        o.min_new = o.max_new = 12;
        o.verify_cache = true;
        double largest = 0;  // |logit|, for the tolerance
        o.on_call = [&](const CallEvent& e) {
          largest = std::max(largest, max_abs(e.logits.data(), int64_t(e.logits.size())));
        };
        std::vector<std::vector<int32_t>> in = {{5, 6, 7, 8, 2}, {12, 2}};
        if (arch == Arch::DecoderOnly) in = {{5, 6, 7, 4}, {12, 4}};
        auto cached = generate(m, in, o);
        o.use_cache = false;
        auto uncached = generate(m, in, o);
        const double tol = logit_tolerance(largest);
        for (size_t i = 0; i < in.size(); ++i) {
          EXPECT_GE(cached[i].max_abs_delta, 0.0);
          EXPECT_LT(cached[i].max_abs_delta, tol) << "largest |logit| " << largest;
          EXPECT_LT(uncached[i].max_abs_delta, tol) << "largest |logit| " << largest;
          EXPECT_EQ(cached[i].tokens, uncached[i].tokens);
          EXPECT_EQ(cached[i].tokens.size(), 12u);
          EXPECT_NEAR(cached[i].score, uncached[i].score, 1e-5);
        }
        // Beam search re-gathers the cache (and the uncached histories) by parent every step.
        o.use_cache = true;
        o.beam = 3;
        o.min_new = 0;
        o.max_new = 8;
        auto beam = generate(m, in, o);
        o.use_cache = false;
        auto beam_uncached = generate(m, in, o);
        for (size_t i = 0; i < in.size(); ++i) {
          EXPECT_LT(beam[i].max_abs_delta, tol) << "largest |logit| " << largest;
          EXPECT_EQ(beam[i].tokens, beam_uncached[i].tokens);
        }
      }
}

TEST(InferCache, DecodeStepsDoNotGrowMemoryOnceWarm) {
  auto net = make_model(small_config(Arch::Seq2Seq, NormPlacement::Pre));
  InferenceModel m = view_of(*net);
  DecodeSession s(m);
  s.begin({{5, 6, 7, 2}, {8, 2}}, {0, 1}, 20);
  const std::vector<int32_t> rows = {0, 1}, bos = {1, 1}, toks = {5, 6};
  s.step(rows, bos);
  s.step(rows, toks);
  const size_t before = pool_bytes_in_use();
  for (int i = 0; i < 10; ++i) s.step(rows, toks);
  EXPECT_EQ(pool_bytes_in_use(), before);
  EXPECT_EQ(s.length(0), 12);
}

TEST(InferCache, GreedyEqualsTrainingGreedyUncached) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    auto net = make_model(small_config(arch, NormPlacement::Post, 3));
    InferenceModel m = view_of(*net);
    std::vector<std::vector<int32_t>> in = {{5, 6, 6, 7, 8, 9, 2}, {12, 13, 2}, {10, 2}};
    if (arch == Arch::DecoderOnly) in = {{5, 6, 6, 4}, {12, 13, 4}, {10, 4}};
    GenerateOptions o;
    o.max_new = 10;
    auto got = generate(m, in, o);
    auto ref = greedy_uncached(*net, test_vocab(), in, 10);
    for (size_t i = 0; i < in.size(); ++i) EXPECT_EQ(got[i].tokens, ref[i]) << "input " << i;
  }
}

// ---- processed vs selected -----------------------------------------------------------------

TEST(InferCache, SelectedTokenIsProcessedOnlyByTheNextStep) {
  auto net = make_model(small_config(Arch::DecoderOnly, NormPlacement::Post));
  InferenceModel m = view_of(*net);
  DecodeSession s(m);
  s.begin({}, {0}, 8);
  const std::vector<int32_t> row = {0};
  const float* l = s.prefill(row, {{5, 6, 7}});
  EXPECT_EQ(s.length(0), 3);  // prefill of 3 tokens: 3 positions, the 4th token only selected
  const int32_t next = static_cast<int32_t>(std::max_element(l, l + m.config().vocab_size) - l);
  EXPECT_EQ(s.length(0), 3);
  s.step(row, std::span<const int32_t>(&next, 1));
  EXPECT_EQ(s.length(0), 4);  // now its K/V are in the cache

  // The reference walk-through: a 2-token prompt, three selections, cache lengths 2, 3, 4.
  GenerateOptions o;
  o.min_new = o.max_new = 3;
  auto r = generate(m, {{5, 6}}, o);
  EXPECT_EQ(r[0].cache_lengths, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(r[0].stop_reason, StopReason::Length);

  auto s2s = make_model(small_config(Arch::Seq2Seq, NormPlacement::Post));
  auto r2 = generate(view_of(*s2s), {{5, 6, 2}}, o);
  EXPECT_EQ(r2[0].cache_lengths, (std::vector<int64_t>{1, 2, 3}));  // <bos>, then each token
}

TEST(InferCache, ReorderGathersBeamRowsAndRewindForgets) {
  auto net = make_model(small_config(Arch::DecoderOnly, NormPlacement::Post));
  InferenceModel m = view_of(*net);
  const int64_t V = m.config().vocab_size;
  DecodeSession s(m);
  s.begin({}, {0, 0, 0}, 8);
  const std::vector<int32_t> r0 = {0};
  s.prefill(r0, {{5, 6, 7}});
  const std::vector<int32_t> parent = {0, 0, -1};  // row 1 continues row 0, row 2 is dropped
  s.reorder(parent);
  EXPECT_EQ(s.length(1), 3);
  EXPECT_EQ(s.length(2), 0);
  const std::vector<int32_t> rows = {0, 1}, toks = {8, 8};
  std::vector<float> a(static_cast<size_t>(2 * V));
  const float* l = s.step(rows, toks);
  std::copy(l, l + 2 * V, a.begin());
  EXPECT_LT(max_diff(a.data(), a.data() + V, V), 1e-6);  // same history, same logits
  s.rewind(1, 3);
  l = s.step(std::span<const int32_t>(rows.data() + 1, 1),
             std::span<const int32_t>(toks.data(), 1));
  EXPECT_LT(max_diff(l, a.data(), V), 1e-6);
  EXPECT_THROW(s.rewind(1, 9), Error);
  EXPECT_EQ(s.kv_bytes_per_position(), 2u * 2u * 8u * sizeof(float));  // 2·L·C·4
}

TEST(InferCache, StepBeyondCapacityIsAnError) {
  auto net = make_model(small_config(Arch::DecoderOnly, NormPlacement::Post));
  InferenceModel m = view_of(*net);
  DecodeSession s(m);
  s.begin({}, {0}, 3);
  const std::vector<int32_t> row = {0};
  s.prefill(row, {{5, 6, 7}});
  const int32_t t = 5;
  EXPECT_THROW(s.step(row, std::span<const int32_t>(&t, 1)), Error);
  EXPECT_THROW(s.begin({}, {0}, 25), Error);  // beyond max_positions
}

// ---- weights and checkpoints ---------------------------------------------------------------

using test_util::error_of;

TEST(InferModel, RejectsMissingMismatchedUnexpectedAndNonFiniteWeights) {
  auto net = make_model(small_config(Arch::Seq2Seq, NormPlacement::Post));
  const ModelConfig cfg = net->config();
  auto w = weights_of(*net);

  auto missing = w;
  missing.erase(missing.begin() + 3);
  EXPECT_NE(error_of([&] { InferenceModel(cfg, test_vocab(), missing); }).find(w[3].name),
            std::string::npos);

  auto wrong = w;
  wrong[0].value = Tensor::zeros({3, 8}, DType::F32);
  std::string e = error_of([&] { InferenceModel(cfg, test_vocab(), wrong); });
  EXPECT_NE(e.find("embed.weight"), std::string::npos) << e;
  EXPECT_NE(e.find("[3,8]"), std::string::npos) << e;

  auto extra = w;
  extra.push_back({"decoder.layers.9.ffn.w1", Tensor::zeros({8, 16}, DType::F32)});
  EXPECT_NE(error_of([&] { InferenceModel(cfg, test_vocab(), extra); }).find("unexpected"),
            std::string::npos);

  auto nan = w;
  nan[5].value = nan[5].value.clone();
  nan[5].value.set(0, std::numeric_limits<double>::quiet_NaN());
  e = error_of([&] { InferenceModel(cfg, test_vocab(), nan); });
  EXPECT_NE(e.find(w[5].name), std::string::npos) << e;
  EXPECT_NE(e.find("non-finite"), std::string::npos) << e;

  EXPECT_NE(error_of([&] {
              InferenceModel(cfg, Vocab::from_tokens({"<pad>", "<bos>", "<eos>"}), w);
            }).find("vocab"),
            std::string::npos);
}

TEST(InferModel, CheckpointRoundTripDecodesLikeTheLiveModel) {
  test_util::TempDir dir("test_infer");
  auto net = make_model(small_config(Arch::Seq2Seq, NormPlacement::Pre, 5));
  Checkpoint c;  // the fields train/trainer.cpp's save() writes
  c.config_json = net->config().to_json().dump();
  c.vocab = test_vocab().tokens();
  c.params = weights_of(*net);
  c.optimizer_name = "adam";
  c.step = 3;
  c.rng_state = Rng(1).state();
  c.loader_state_json = "{}";
  c.metrics_json = "{}";
  save_checkpoint(dir.file("ckpt.bin"), c);

  InferenceModel loaded = InferenceModel::load(dir.file("ckpt.bin"));
  EXPECT_EQ(loaded.layout(), WeightLayout::Decode);  // load() packs the decoder's matrices
  EXPECT_EQ(loaded.decoder_layers()[0].sublayer(SublayerKind::FeedForward).ffn.w1.shape(),
            (Shape{1, 8, 32}));  // [F/32, C, 32]
  EXPECT_EQ(loaded.config().d_model, 8);
  EXPECT_EQ(loaded.vocab().tokens(), test_vocab().tokens());
  GenerateOptions o;
  o.max_new = 8;
  auto a = generate(loaded, {{5, 6, 7, 2}}, o);
  // The live model in the same layout: the very same bits. (In the Training layout, whose
  // products sum in BLAS's order, the same tokens; its logits are compared in InferLogits.)
  auto b = generate(view_of(*net, WeightLayout::Decode), {{5, 6, 7, 2}}, o);
  EXPECT_EQ(a[0].tokens, b[0].tokens);
  EXPECT_EQ(a[0].score, b[0].score);
  EXPECT_EQ(a[0].tokens, generate(view_of(*net), {{5, 6, 7, 2}}, o)[0].tokens);

  // Missing and corrupt files are Errors naming the file.
  EXPECT_NE(error_of([&] { InferenceModel::load(dir.file("nope.bin")); }).find("nope.bin"),
            std::string::npos);
  { std::ofstream(dir.file("bad.bin"), std::ios::binary) << "not a checkpoint at all"; }
  EXPECT_NE(error_of([&] { InferenceModel::load(dir.file("bad.bin")); }).find("bad.bin"),
            std::string::npos);
  // A config whose shapes disagree with the stored weights.
  ModelConfig other = net->config();
  other.d_model = 16;
  c.config_json = other.to_json().dump();
  save_checkpoint(dir.file("mismatch.bin"), c);
  std::string e = error_of([&] { InferenceModel::load(dir.file("mismatch.bin")); });
  EXPECT_NE(e.find("mismatch.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("embed.weight"), std::string::npos) << e;
}

TEST(InferModel, EncodeInputChecksTextAndLength) {
  auto net = make_model(small_config(Arch::Seq2Seq, NormPlacement::Post));
  InferenceModel m = view_of(*net);
  const TextCodec& tok = m.codec();
  EXPECT_EQ(encode_input(m, tok, "今天"), (std::vector<int32_t>{5, 6, 2}));
  EXPECT_THROW(encode_input(m, tok, ""), Error);
  EXPECT_THROW(encode_input(m, tok, std::string(30, 'a')), Error);  // > max_positions 24
  const CharCodec no_unk(Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<sep>", "今", "天", "气",
                                             "很", "好", "学习", "！", "a", "b", "x"}));
  EXPECT_THROW(encode_input(m, no_unk, "今Z"), Error);  // no <unk>: the tokenizer refuses
  auto lm = make_model(small_config(Arch::DecoderOnly, NormPlacement::Post));
  InferenceModel ml = view_of(*lm);
  EXPECT_EQ(encode_input(ml, tok, "ab"), (std::vector<int32_t>{12, 13, 4}));  // src <sep>
}

}  // namespace
}  // namespace seqtape
