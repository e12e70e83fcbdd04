// infer/trace.h: generate() recorded step by step, on the F15 model and on small seeded models.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "infer/trace.h"
#include "reference/f15.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

using nlohmann::json;

std::unique_ptr<InferenceModel> live(const TransformerModel& net, const Vocab& v) {
  std::vector<NamedTensor> w;
  for (auto& [name, p] : net.named_parameters()) w.push_back({name, p.value()});
  return std::make_unique<InferenceModel>(net.config(), v, w, "live model");
}

void expect_rows_sum_to_one(const json& att) {
  for (const json& a : att)
    for (const json& row : a["weights"]) {
      double s = 0;
      for (const json& x : row) s += x.get<double>();
      EXPECT_NEAR(s, 1.0, 1e-5) << a["name"];
    }
}

TEST(Trace, F15GreedyRecordsEveryRoundLikeTheDocument) {
  reference::F15Model f = reference::make_f15_model();
  Vocab vocab = reference::f15_vocab();
  auto m = live(*f.model, vocab);
  GenerateOptions opt;
  opt.max_new = 8;
  TracedRun tr = generate_traced(*m, {1, 2}, opt, GreedySearch());
  const json& t = tr.trace;
  EXPECT_EQ(t["format"], "seqtape-trace");
  EXPECT_EQ(t["version"], 1);
  ASSERT_EQ(t["steps"].size(), 3u);
  const std::vector<std::string> phase = {"prefill", "decode", "decode"};
  const std::vector<std::vector<int32_t>> fed = {{1, 2}, {3}, {5}};
  const std::vector<int32_t> sel = {3, 5, 6};
  auto recompute = reference::greedy_rounds_recompute(*f.model, vocab, {1, 2}, 8);
  ASSERT_EQ(recompute.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const json& s = t["steps"][i];
    EXPECT_EQ(s["phase"], phase[i]);
    EXPECT_EQ(s["fed"].get<std::vector<int32_t>>(), fed[i]);
    EXPECT_EQ(s["cache_after"].get<int64_t>(), static_cast<int64_t>(i) + 2);
    EXPECT_EQ(s["cache_before"].get<int64_t>(), i == 0 ? 0 : static_cast<int64_t>(i) + 1);
    EXPECT_EQ(s["selected"]["id"].get<int32_t>(), sel[i]);
    EXPECT_EQ(s["stop"]["stopped"].get<bool>(), i == 2);
    EXPECT_LT(s["max_abs_delta"].get<double>(), 1e-4);  // cached vs recomputed logits
    // The cached engine's logits are the training model's (recomputed over the prefix).
    for (size_t v = 0; v < 7; ++v)
      EXPECT_NEAR(s["logits"][v].get<double>(), recompute[i].logits[v], 1e-4) << i << "," << v;
    ASSERT_EQ(s["attention"].size(), 1u);
    const json& a = s["attention"][0];
    EXPECT_EQ(a["name"], "decoder.layers.0.self_attn");
    EXPECT_EQ(a["weights"].size(), fed[i].size());
    EXPECT_EQ(a["weights"][0].size(), i + 2);
    expect_rows_sum_to_one(s["attention"]);
    // The same weights the training model computes for these query rows.
    for (size_t r = 0; r < a["weights"].size(); ++r)
      for (size_t c = 0; c < a["weights"][r].size(); ++c)
        EXPECT_NEAR(a["weights"][r][c].get<double>(), recompute[i].attention[0].weights[r][c],
                    1e-5);
  }
  EXPECT_EQ(t["steps"][2]["stop"]["reason"], "eos");
  EXPECT_EQ(t["result"]["cache_lengths"], json({2, 3, 4}));
  EXPECT_EQ(t["result"]["tokens"], json({3, 5, 6}));
  EXPECT_EQ(t["result"]["text"], "学习！");
  // Tracing observes; it does not change the run.
  GenerateResult plain = generate(*m, {{1, 2}}, opt).at(0);
  EXPECT_EQ(plain.tokens, tr.result.tokens);
  EXPECT_EQ(plain.cache_lengths, tr.result.cache_lengths);
}

Vocab small_vocab() {
  return Vocab::from_tokens(
      {"<pad>", "<bos>", "<eos>", "<unk>", "<sep>", "今", "天", "气", "很", "好", "的", "是"});
}

std::unique_ptr<TransformerModel> small_model(Arch arch, const Vocab& v) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = v.size();
  c.d_model = 8;
  c.n_heads = 2;
  c.n_encoder_layers = arch == Arch::Seq2Seq ? 2 : 0;
  c.n_decoder_layers = 2;
  c.d_ff = 16;
  c.max_positions = 16;
  c.init_seed = 7;
  return make_model(c);
}

TEST(Trace, Seq2SeqGreedyHasEncoderSelfAndCrossAttentionPerLayerAndHead) {
  Vocab v = small_vocab();
  auto net = small_model(Arch::Seq2Seq, v);
  auto m = live(*net, v);
  GenerateOptions opt;
  opt.max_new = 5;
  const std::vector<int32_t> src = {5, 6, 6, 7, 2};
  TracedRun tr = generate_traced(*m, src, opt, GreedySearch());
  const json& t = tr.trace;
  EXPECT_EQ(t["decoder_prompt"], json({1}));
  ASSERT_GE(t["steps"].size(), 1u);
  const json& first = t["steps"][0];
  EXPECT_EQ(first["phase"], "prefill");
  EXPECT_EQ(first["fed"], json({1}));
  // encoder: 2 layers × 2 heads; decoder: 2 layers × (self + cross) × 2 heads
  EXPECT_EQ(first["attention"].size(), 4u + 8u);
  int cross = 0;
  for (const json& a : first["attention"]) {
    if (a["kind"] == "cross") {
      ++cross;
      EXPECT_EQ(a["cols"].size(), src.size());
    }
  }
  EXPECT_EQ(cross, 4);
  for (size_t i = 0; i < t["steps"].size(); ++i) {
    const json& s = t["steps"][i];
    expect_rows_sum_to_one(s["attention"]);
    EXPECT_EQ(s["cache_after"].get<int64_t>(), static_cast<int64_t>(i) + 1);
    if (i > 0) {
      EXPECT_EQ(s["attention"].size(), 8u);  // the encoder ran once
    }
    EXPECT_LT(s["max_abs_delta"].get<double>(), 1e-4);
  }
  GenerateResult plain = generate(*m, {src}, opt).at(0);
  EXPECT_EQ(plain.tokens, tr.result.tokens);
}

TEST(Trace, BeamIsRecordedPerHypothesisWithParents) {
  Vocab v = small_vocab();
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    auto net = small_model(arch, v);
    auto m = live(*net, v);
    GenerateOptions opt;
    opt.beam = 3;
    opt.max_new = 4;
    const std::vector<int32_t> in = {5, 6, 7, arch == Arch::Seq2Seq ? 2 : 4};
    TracedRun tr = generate_traced(*m, in, opt, BeamSearch());
    const json& t = tr.trace;
    EXPECT_EQ(t["search"]["kind"], "beam");
    EXPECT_EQ(t["search"]["beam_size"], 3);
    int64_t round1 = 0;
    for (const json& s : t["steps"]) {
      ASSERT_TRUE(s.contains("hypothesis"));
      ASSERT_TRUE(s.contains("parent"));
      if (s["index"] == 1) ++round1;
      if (!s["selected"].is_null()) {
        // the sequence is the parent's plus the selected token
        EXPECT_EQ(s["sequence"].back(), s["selected"]["id"]);
        EXPECT_TRUE(s.contains("score"));
      } else {
        EXPECT_EQ(s["stop"]["reason"], "pruned");
      }
    }
    // Round 0 has one hypothesis (3 candidates kept); round 1 records each of the 3.
    EXPECT_GE(round1, 3) << to_string(arch);
    GenerateResult plain = generate(*m, {in}, opt, BeamSearch()).at(0);
    EXPECT_EQ(plain.tokens, tr.result.tokens) << to_string(arch);
    EXPECT_EQ(t["result"]["cache_lengths"].get<std::vector<int64_t>>(), plain.cache_lengths);
  }
}

// web/f15_trace.js embeds `seqtape generate --trace` on the shipped F15 checkpoint: it must
// still be what the engine records.
TEST(Trace, EmbeddedF15TraceOfThePageIsCurrent) {
  const std::string root = SEQTAPE_SOURCE_DIR;
  std::ifstream in(root + "/web/f15_trace.js");
  ASSERT_TRUE(in) << "web/f15_trace.js is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string js = ss.str();
  const auto at = js.find("window.SEQTAPE_EMBEDDED_TRACE = ");
  ASSERT_NE(at, std::string::npos);
  const auto start = js.find('{', at), end = js.rfind('}');
  json embedded = json::parse(js.substr(start, end - start + 1));
  InferenceModel m = InferenceModel::load(root + "/datasets/f15/checkpoint.bin");
  GenerateOptions opt;
  TraceOptions topt;
  topt.input_text = "我爱";
  json fresh =
      generate_traced(m, encode_input(m, m.codec(), "我爱"), opt, GreedySearch(), topt).trace;
  ASSERT_EQ(embedded["steps"].size(), fresh["steps"].size());
  for (size_t i = 0; i < fresh["steps"].size(); ++i) {
    const json &a = embedded["steps"][i], &b = fresh["steps"][i];
    EXPECT_EQ(a["selected"]["id"], b["selected"]["id"]);
    EXPECT_EQ(a["cache_after"], b["cache_after"]);
    EXPECT_EQ(a["fed"], b["fed"]);
    EXPECT_NEAR(a["selected"]["prob"].get<double>(), b["selected"]["prob"].get<double>(), 1e-5);
  }
  EXPECT_EQ(embedded["result"]["cache_lengths"], json({2, 3, 4}));
}

}  // namespace
}  // namespace seqtape
