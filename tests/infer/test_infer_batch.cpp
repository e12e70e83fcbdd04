// Batched decoding across inputs on the layout the CLI loads (WeightLayout::Decode, whose
// matrices go through the row-independent gemm_nt_rowwise; each source is encoded alone), on
// inputs of different lengths: every row gives the tokens and the very score it gives alone,
// for greedy, beam and sampling. Also: several samples per input,
// per-input seeds, special tokens kept out of the text, and load_model() on a checkpoint, its
// run directory and its export.

#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "infer/export.h"
#include "infer/load.h"
#include "infer/model.h"
#include "infer/search.h"
#include "infer/session.h"
#include "io/checkpoint.h"
#include "tensor/kernels.h"
#include "tests/infer/fixtures.h"
#include "tests/infer/wide_model.h"
#include "tests/test_util.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

using test_util::expect_each_alone;
using test_util::make_wide;
using test_util::varied_inputs;
using test_util::Wide;
using test_util::wide_config;
using test_util::wide_vocab;

TEST(InferBatch, EveryRowGivesWhatItGivesAloneOnTheDecodeLayout) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
    for (uint64_t seed : {3u, 4u}) {
      Wide w = make_wide(arch, seed);
      const auto in = varied_inputs(arch);
      GenerateOptions greedy;
      greedy.max_new = 16;
      GenerateOptions beam = greedy;
      beam.beam = 4;
      beam.n_best = 2;
      GenerateOptions sample = greedy;
      sample.sample = true;
      sample.temperature = 1.2;
      sample.top_k = 20;
      sample.seed = 7;
      const std::string tag = std::string(arch == Arch::Seq2Seq ? "seq2seq" : "decoder-only") +
                              " seed " + std::to_string(seed);
      expect_each_alone(*w.m, in, greedy, tag + " greedy");
      expect_each_alone(*w.m, in, beam, tag + " beam");
      expect_each_alone(*w.m, in, sample, tag + " sampling");
    }
  }
}

// A call big enough runs in parts of its rows (or, encoding, its sources), each part's whole
// decoder (encoder) on one thread (infer/session.h). Forced here on the wide model, split
// threshold 0, with 2 and 3 threads: every row still gives what it gives alone (to the bit), as
// rows leave the batch and the parts shrink back to one.
TEST(InferBatch, RowsSplitOverThreadsGiveWhatEachGivesAlone) {
  struct Restore {
    double flops = set_decode_split_min_flops(0);
    ~Restore() {
      set_decode_split_min_flops(flops);
      kernels::gemm_nt_rowwise_set_threads(0);
    }
  } restore;
  for (int threads : {2, 3}) {
    kernels::gemm_nt_rowwise_set_threads(threads);
    for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly}) {
      Wide w = make_wide(arch, 8);
      std::vector<std::vector<int32_t>> in;  // 50 inputs of 1 to 11 tokens, 270 in all
      for (int32_t shift = 0; shift < 10; ++shift)
        for (std::vector<int32_t> x : varied_inputs(arch)) {
          for (size_t t = 0; t + 1 < x.size(); ++t) x[t] = 5 + (x[t] + 9 * shift) % 45;
          in.push_back(x);
        }
      const std::string tag = std::string(arch == Arch::Seq2Seq ? "seq2seq" : "decoder-only") +
                              ", " + std::to_string(threads) + " threads";
      GenerateOptions greedy;
      greedy.max_new = 12;
      GenerateOptions beam = greedy;
      beam.beam = 3;
      GenerateOptions sample = greedy;
      sample.sample = true;
      sample.seed = 11;
      GenerateOptions uncached = greedy;  // every step recomputes each row's whole history
      uncached.use_cache = false;
      const int64_t before = decode_split_calls();
      expect_each_alone(*w.m, in, greedy, tag + " greedy");
      expect_each_alone(*w.m, in, beam, tag + " beam");
      expect_each_alone(*w.m, in, sample, tag + " sampling");
      expect_each_alone(*w.m, in, uncached, tag + " uncached");
      EXPECT_GT(decode_split_calls(), before) << tag << ": no call ran in parts";
      // Teacher forcing: the logits of every fed position (all_positions) of the 50 rows at
      // once are each row's own.
      const int64_t V = w.m->config().vocab_size;
      std::vector<std::vector<int32_t>> feed;  // 2 to 12 tokens per row
      for (const std::vector<int32_t>& x : in) {
        feed.push_back({arch == Arch::Seq2Seq ? 1 : 3});
        feed.back().insert(feed.back().end(), x.begin(), x.end());
      }
      const auto start = [&](DecodeSession& session, size_t first, size_t count) {
        std::vector<int32_t> rows(count);
        std::iota(rows.begin(), rows.end(), 0);
        const std::vector<std::vector<int32_t>> sources(
            arch == Arch::Seq2Seq ? in.begin() + long(first) : in.end(),
            arch == Arch::Seq2Seq ? in.begin() + long(first + count) : in.end());
        session.begin(sources, arch == Arch::Seq2Seq ? rows : std::vector<int32_t>(count, 0), 16);
        return rows;
      };
      DecodeSession all(*w.m);
      const int64_t encoder_before = decode_split_calls();
      const std::vector<int32_t> rows = start(all, 0, in.size());  // (encodes every source)
      if (arch == Arch::Seq2Seq) {
        EXPECT_GT(decode_split_calls(), encoder_before) << tag << ": the encoder ran in one part";
      }
      const int64_t split_before = decode_split_calls();
      const float* got = all.prefill(rows, feed, /*all_positions=*/true);
      EXPECT_GT(decode_split_calls(), split_before) << tag << ": the prefill ran in one part";
      int64_t j = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        DecodeSession one(*w.m);
        const float* alone = one.prefill(start(one, i, 1), {feed[i]}, true);
        for (size_t t = 0; t < feed[i].size(); ++t, ++j)
          for (int64_t v = 0; v < V; ++v)
            ASSERT_EQ(got[j * V + v], alone[int64_t(t) * V + v])
                << tag << ", input " << i << " position " << t << " token " << v;
      }
    }
  }
}

// Rows that end early leave the batch; the rest continue and still match.
TEST(InferBatch, RowsThatEndEarlyLeaveAndTheOthersStillMatch) {
  Wide w = make_wide(Arch::Seq2Seq, 5);
  const auto in = varied_inputs(Arch::Seq2Seq);
  GenerateOptions o;
  o.max_new = 12;
  const auto free_run = generate(*w.m, in, o);
  // End at the second token input 0 chooses: it stops there, others may stop anywhere.
  ASSERT_GE(free_run[0].tokens.size(), 2u);
  o.end_ids = {2, free_run[0].tokens[1]};
  const auto ended = generate(*w.m, in, o);
  EXPECT_EQ(ended[0].tokens.size(), 1u);
  EXPECT_EQ(ended[0].stop_reason, StopReason::Eos);
  expect_each_alone(*w.m, in, o, "early end");
}

TEST(InferBatch, NumSamplesDrawsEachWithItsOwnSeed) {
  Wide w = make_wide(Arch::DecoderOnly, 6);
  const auto in = varied_inputs(Arch::DecoderOnly);
  GenerateOptions o;
  o.max_new = 10;
  o.sample = true;
  o.seed = 100;
  o.num_samples = 3;
  const auto many = generate(*w.m, in, o);
  ASSERT_EQ(many.size(), in.size());
  bool some_differ = false;
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(many[i].n_best.size(), 3u);
    EXPECT_EQ(many[i].tokens, many[i].n_best[0].tokens);
    for (uint64_t k = 0; k < 3; ++k) {
      GenerateOptions one = o;
      one.num_samples = 1;
      one.seed = 100 + k;
      const GenerateResult alone = generate(*w.m, {in[i]}, one).at(0);
      EXPECT_EQ(many[i].n_best[k].tokens, alone.tokens) << "input " << i << " draw " << k;
      EXPECT_NEAR(many[i].n_best[k].score, alone.score, 1e-5);
    }
    some_differ = some_differ || many[i].n_best[0].tokens != many[i].n_best[1].tokens;
  }
  EXPECT_TRUE(some_differ) << "three draws at temperature 1 were identical for every input";
}

TEST(InferBatch, PerInputSeedsMatchSingleRunsAndAreChecked) {
  Wide w = make_wide(Arch::Seq2Seq, 7);
  const auto in = varied_inputs(Arch::Seq2Seq);
  GenerateOptions o;
  o.max_new = 10;
  o.sample = true;
  for (size_t i = 0; i < in.size(); ++i) o.seeds.push_back(1000 + 17 * i);
  const auto batch = generate(*w.m, in, o);
  for (size_t i = 0; i < in.size(); ++i) {
    GenerateOptions one = o;
    one.seeds.clear();
    one.seed = 1000 + 17 * i;
    EXPECT_EQ(batch[i].tokens, generate(*w.m, {in[i]}, one).at(0).tokens) << "input " << i;
  }
  o.seeds.pop_back();
  EXPECT_THROW(generate(*w.m, in, o), Error);
  GenerateOptions bad;
  bad.num_samples = 2;  // without sample
  EXPECT_THROW(generate(*w.m, in, bad), Error);
}

// <unk> and <sep> are generated (their output bias is made huge) and stay out of the text.
TEST(InferBatch, SpecialTokensAreInTokensButNotInText) {
  Wide w = make_wide(Arch::Seq2Seq, 8);
  const Vocab& v = w.m->vocab();
  Tensor bias = w.m->out_bias();
  GenerateOptions o;
  o.max_new = 6;
  const auto before = generate(*w.m, {{5, 2}}, o).at(0);
  ASSERT_FALSE(before.text.empty());
  bias.set(*v.unk_id(), 50.0);  // shared storage: the model now prefers <unk>
  const auto after = generate(*w.m, {{5, 2}}, o).at(0);
  ASSERT_EQ(after.tokens.size(), 6u);
  EXPECT_EQ(after.tokens[0], *v.unk_id());
  EXPECT_EQ(after.text, "");
}

TEST(InferLoad, CheckpointRunDirectoryAndExportGiveTheSameTokens) {
  test_util::TempDir dir("load");
  const Vocab v = wide_vocab();
  auto net = make_model(wide_config(Arch::Seq2Seq, v, 9));
  Checkpoint c;
  c.config_json = net->config().to_json().dump();
  c.vocab = v.tokens();
  c.params = test_util::weights_of(*net);
  std::filesystem::create_directories(dir.path() / "run");
  const std::string ck = dir.file("run/checkpoint.bin");
  save_checkpoint(ck, c);
  export_checkpoint(ck, dir.file("exported"));
  GenerateOptions o;
  o.max_new = 12;
  const auto in = varied_inputs(Arch::Seq2Seq);
  const auto want = generate(load_model(ck), in, o);
  for (const std::string& path : {dir.file("run"), dir.file("exported")}) {
    const auto got = generate(load_model(path), in, o);
    for (size_t i = 0; i < in.size(); ++i) {
      EXPECT_EQ(got[i].tokens, want[i].tokens) << path << " input " << i;
      EXPECT_NEAR(got[i].score, want[i].score, 1e-5) << path;
    }
  }
  std::filesystem::create_directories(dir.path() / "empty");
  EXPECT_THROW(load_model(dir.file("empty")), Error);
}

}  // namespace
}  // namespace seqtape
