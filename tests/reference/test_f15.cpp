#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "reference/f15.h"
#include "reference/f15_run.h"

namespace seqtape::reference {
namespace {

namespace fs = std::filesystem;

const std::string kShipped = std::string(SEQTAPE_SOURCE_DIR) + "/datasets/f15";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// The published model, built once for the whole file (the fit takes a few hundred steps).
F15Model& published() {
  static F15Model m = make_f15_model();
  return m;
}

TEST(F15, VocabularyHasTheDocumentsIdsAndMultiCharToken) {
  Vocab v = f15_vocab();
  ASSERT_EQ(v.size(), 7);
  EXPECT_EQ(v.token(1), "我");
  EXPECT_EQ(v.token(2), "爱");
  EXPECT_EQ(v.token(3), "学习");
  EXPECT_EQ(v.token(5), "！");
  EXPECT_EQ(v.eos_id(), 6);
  EXPECT_EQ(v.pad_id(), 0);
  EXPECT_EQ(v.bos_id(), 4);
  Tokenizer tok(v);
  EXPECT_EQ(tok.encode("我爱"), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(tok.encode("我爱学习！"), (std::vector<int32_t>{1, 2, 3, 5}));
  // The shipped vocabulary file is the same list.
  EXPECT_EQ(Vocab::load(kShipped + "/vocab.txt").tokens(), v.tokens());
}

TEST(F15, ConfigIsTheDocumentsModel) {
  ModelConfig c = f15_config();
  EXPECT_EQ(c.arch, Arch::DecoderOnly);
  EXPECT_EQ(c.d_model, 4);
  EXPECT_EQ(c.n_heads, 1);
  EXPECT_EQ(c.n_decoder_layers, 1);
  EXPECT_EQ(c.activation, Activation::Tanh);
  EXPECT_EQ(c.norm, NormPlacement::None);
  EXPECT_EQ(c.pos_encoding, PosEncoding::None);
  auto m = f15_base_model();
  for (auto& [name, p] : m->named_parameters()) {
    EXPECT_EQ(name.find("norm"), std::string::npos) << name;
    EXPECT_EQ(name.find("pos"), std::string::npos) << name;
  }
}

TEST(F15, OnlyTheHeadIsFittedAndFrozenParametersGetNoGradient) {
  const F15Model& m = published();
  auto base = f15_base_model();
  EXPECT_GT(m.fit.frozen_without_grad, 0);
  for (auto& [name, p] : m.model->named_parameters()) {
    std::vector<double> got = p.value().to_vector();
    std::vector<double> before = base->parameter(name).value().to_vector();
    if (name.rfind("out_proj.", 0) == 0)
      EXPECT_NE(got, before) << name;
    else
      EXPECT_EQ(got, before) << name << " changed although frozen";
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_GE(m.fit.target_prob[i], 0.85) << "prefix " << i;
    EXPECT_GT(m.fit.margin[i], 1.0) << "prefix " << i;
  }
  EXPECT_LT(m.fit.final_loss, m.fit.first_loss);
}

TEST(F15, GreedyFromWoAiSelectsXuexiBangEosWithCacheLengths234) {
  F15Model& m = published();
  auto rounds = greedy_rounds_recompute(*m.model, f15_vocab(), {1, 2}, 10);
  ASSERT_EQ(rounds.size(), 3u);
  std::vector<int32_t> selected;
  std::vector<int64_t> cache;
  for (const Round& r : rounds) {
    selected.push_back(r.selected.id);
    cache.push_back(r.cache_after);
  }
  EXPECT_EQ(selected, (std::vector<int32_t>{3, 5, 6}));
  EXPECT_EQ(cache, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(rounds[0].phase, "prefill");
  EXPECT_EQ(rounds[0].fed, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(rounds[1].phase, "decode");
  EXPECT_EQ(rounds[1].fed, (std::vector<int32_t>{3}));
  EXPECT_EQ(rounds[2].fed, (std::vector<int32_t>{5}));
  EXPECT_EQ(rounds[2].stop, std::optional<std::string>("eos"));
  EXPECT_FALSE(rounds[0].stop.has_value());
  // Attention: the rows fed this round over every processed key; causal zeros above.
  ASSERT_EQ(rounds[0].attention.size(), 1u);
  EXPECT_EQ(rounds[0].attention[0].weights.size(), 2u);
  EXPECT_EQ(rounds[0].attention[0].weights[0][1], 0.0);
  EXPECT_EQ(rounds[2].attention[0].weights.size(), 1u);
  EXPECT_EQ(rounds[2].attention[0].weights[0].size(), 4u);
}

TEST(F15, ShippedCheckpointEqualsTheRegeneratedOne) {
  const F15Model& m = published();
  std::string regenerated = checkpoint_to_bytes(f15_checkpoint(*m.model, m.fit));
  std::string shipped = read_bytes(kShipped + "/checkpoint.bin");
  EXPECT_EQ(regenerated.size(), shipped.size());
  EXPECT_TRUE(regenerated == shipped)
      << "datasets/f15/checkpoint.bin differs from the generator's output; rerun "
         "`seqtape walkthrough --write-f15 datasets/f15`";
  // And the checkpoint loads back into a model that decodes the same.
  auto loaded = load_f15_model(kShipped + "/checkpoint.bin");
  auto rounds = greedy_rounds_recompute(*loaded, f15_vocab(), {1, 2}, 10);
  ASSERT_EQ(rounds.size(), 3u);
  EXPECT_EQ(rounds[2].selected.id, 6);
}

TEST(F15, OutputHeadExample) {
  OutputHeadExample ex = output_head_example();
  EXPECT_EQ(ex.scores, (std::vector<double>{0, 1, 2, 3, -1, -2}));
  EXPECT_EQ(ex.argmax, 3);
}

TEST(F15, StateExampleCacheLagsTheOutputByOne) {
  auto rows = state_example(*published().model);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].cache, 3);
  EXPECT_EQ(rows[1].output.size(), 4u);  // [1,2,3,5]: selected, not processed
  EXPECT_EQ(rows[1].output.back(), 5);
  EXPECT_EQ(rows[1].pending, (std::vector<int32_t>{5}));
  EXPECT_EQ(rows[2].cache, 4);
  EXPECT_EQ(rows[2].output.size(), 5u);
  // The document's given probabilities [0.6,0.3,0.1] over ids [4,5,<eos>]: greedy takes 4.
  EXPECT_EQ(greedy_pick({4, 5, 6}, {0.6, 0.3, 0.1}), 4);
}

TEST(F15, RunJsonHasEveryParameterAndIntermediateAndMatchesTheShippedOne) {
  F15Model& m = published();
  nlohmann::json run = f15_run_json(*m.model);
  EXPECT_EQ(run["parameters"].size(), m.model->named_parameters().size());
  EXPECT_EQ(run["result"]["selections"], nlohmann::json({3, 5, 6}));
  EXPECT_EQ(run["result"]["cache_lengths"], nlohmann::json({2, 3, 4}));
  ASSERT_EQ(run["rounds"].size(), 3u);
  for (const auto& r : run["rounds"]) {
    for (const char* key :
         {"x", "q", "k_new", "v_new", "k_cache", "v_cache", "scores", "weights", "context",
          "attn_out", "h1", "ffn_pre", "ffn_act", "ffn_out", "h", "logits", "probs"})
      EXPECT_TRUE(r.contains(key)) << key;
    // The plain cached forward agrees with recomputing the prefix on the training model.
    EXPECT_LT(r["max_abs_delta_recompute"].get<double>(), 1e-5);
    EXPECT_LT(r["max_abs_delta_cached_engine"].get<double>(), 1e-5);
    EXPECT_EQ(r["k_cache"].size(), r["cache_after"].get<size_t>());
  }
  std::ifstream in(kShipped + "/run.json");
  ASSERT_TRUE(in) << "datasets/f15/run.json is missing";
  nlohmann::json shipped = nlohmann::json::parse(in);
  EXPECT_LT(json_max_abs_diff(run, shipped), 1e-5)
      << "datasets/f15/run.json differs from the generator's output; rerun "
         "`seqtape walkthrough --write-f15 datasets/f15`";
}

}  // namespace
}  // namespace seqtape::reference
