// Token-budget batching (length-bucketed, resumable) and gradient accumulation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "train/copy_task.h"
#include "train/dataset.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

namespace fs = std::filesystem;
using test_util::TempDir;

// Examples of source and target length 1..n (varied, so that bucketing matters).
std::vector<Example> varied_examples(size_t n) {
  std::vector<Example> out;
  for (size_t i = 0; i < n; ++i) {
    const auto len = static_cast<size_t>(1 + (i * 7919) % 23);
    Example e;
    e.enc.assign(len, 5);
    e.enc.push_back(2);
    e.dec_in.assign(len + 1, 6);
    e.dec_in[0] = 1;
    e.labels.assign(len, 6);
    e.labels.push_back(2);
    out.push_back(std::move(e));
  }
  return out;
}

int64_t cost(const Example& e) {
  return static_cast<int64_t>(std::max(e.enc.size(), e.dec_in.size()));
}

TEST(TokenBatching, BatchesKeepTheBudgetAndCoverEveryExampleOncePerEpoch) {
  const std::vector<Example> ex = varied_examples(300);
  LoaderOptions o;
  o.batch_tokens = 64;
  o.pool = 50;
  o.seed = 4;
  DataLoader l(ex, 0, o);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const int64_t nb = l.batches_per_epoch();
    std::vector<int> seen(ex.size(), 0);
    for (int64_t b = 0; b < nb; ++b) {
      const Batch batch = l.next_batch();
      int64_t longest = 0;
      for (uint32_t i : batch.index) {
        ++seen[i];
        longest = std::max(longest, cost(ex[i]));
      }
      if (batch.B > 1) {
        EXPECT_LE(batch.B * longest, 64) << "batch " << b;
      }
      EXPECT_EQ(batch.S, longest);  // the budget counts what the batch pads to
    }
    for (size_t i = 0; i < ex.size(); ++i) ASSERT_EQ(seen[i], 1) << "example " << i;
    EXPECT_EQ(l.state().cursor, ex.size());
  }
}

TEST(TokenBatching, PadsLessThanExampleCountBatches) {
  const std::vector<Example> ex = varied_examples(400);
  LoaderOptions by_count;
  by_count.batch_size = 8;
  LoaderOptions by_tokens;
  by_tokens.batch_tokens = 8 * 12;  // about as many tokens per batch
  DataLoader a(ex, 0, by_count), b(ex, 0, by_tokens);
  for (int i = 0; i < a.batches_per_epoch(); ++i) a.next_batch();
  for (int i = 0; i < b.batches_per_epoch(); ++i) b.next_batch();
  EXPECT_GT(a.padding().fraction(), 0.25);
  EXPECT_LT(b.padding().fraction(), 0.1);
  EXPECT_GT(b.padding().padded, 0);
}

// Half the examples have a long source and a short target, half the reverse: their cost
// (the longer side) is the same, so a pool sorted by cost alone mixes them and every batch pads
// both sides to the long length. Sorted by source and target after the cost, each batch holds
// one kind (but the one batch where the kinds meet).
TEST(TokenBatching, SortsBySourceAndTargetSoThatNeitherSidePads) {
  std::vector<Example> ex;
  for (size_t i = 0; i < 400; ++i) {
    const bool long_source = (i * 7919) % 2 == 0;
    Example e;
    e.enc.assign(long_source ? 12 : 2, 5);
    e.dec_in.assign(long_source ? 3 : 12, 6);
    e.labels = e.dec_in;
    ex.push_back(std::move(e));
  }
  LoaderOptions o;
  o.batch_tokens = 12 * 10;
  o.seed = 3;
  DataLoader l(ex, 0, o);
  for (int64_t b = 0; b < l.batches_per_epoch(); ++b) l.next_batch();
  EXPECT_LT(l.padding().fraction(), 0.02);
  EXPECT_GT(l.padding().real, 0);
}

TEST(TokenBatching, StateRestoresTheExactBatchSequence) {
  const std::vector<Example> ex = varied_examples(120);
  LoaderOptions o;
  o.batch_tokens = 48;
  o.pool = 30;
  o.seed = 9;
  DataLoader a(ex, 0, o);
  for (int i = 0; i < 7; ++i) a.next_batch();
  const LoaderState s = a.state();
  ASSERT_FALSE(s.bounds.empty());
  DataLoader b(ex, 0, o);
  b.set_state(s);
  for (int i = 0; i < 40; ++i) {  // across epoch boundaries
    const Batch x = a.next_batch(), y = b.next_batch();
    ASSERT_EQ(x.index, y.index) << "batch " << i;
    ASSERT_EQ(x.src, y.src);
  }
  // A cursor inside a batch, or bounds for an example-count loader, are refused.
  LoaderState bad = s;
  for (size_t i = 0; i < s.bounds.size(); ++i)
    if (s.bounds[i] - (i ? s.bounds[i - 1] : 0u) >= 2) {  // inside a batch of two or more
      bad.cursor = s.bounds[i] - 1;
      break;
    }
  EXPECT_ERROR_HAS(b.set_state(bad), "not at a batch boundary");
  bad = s;
  bad.bounds.pop_back();
  EXPECT_ERROR_HAS(b.set_state(bad), "batch bounds do not end");
  LoaderOptions count;
  DataLoader c(ex, 0, count);
  EXPECT_ERROR_HAS(c.set_state(s), "token-budget batch bounds");
}

fs::path copy_data(const TempDir& dir) {
  CopyTaskOptions co;
  co.n_train = 64;
  co.n_valid = 8;
  co.max_len = 9;
  co.seed = 5;
  write_copy_task(dir.path().string(), generate_copy_task(co), co.alphabet);
  return dir.path();
}

TrainOptions small_options(const fs::path& data, const fs::path& out) {
  TrainOptions o;
  o.data = (data / "train.tsv").string();
  o.valid_data = (data / "valid.tsv").string();
  o.vocab = (data / "vocab.txt").string();
  o.out_dir = out.string();
  o.model = preset("default", 2);
  o.model.d_model = 8;
  o.model.n_heads = 2;
  o.model.d_ff = 16;
  o.model.n_encoder_layers = o.model.n_decoder_layers = 1;
  o.model.dropout = 0.0;
  o.schedule.lr = 3e-3;
  o.progress = 0;
  o.log_every = 1000;
  o.eval_max = 2;
  return o;
}

TEST(TokenBatching, TrainingResumesBitIdentically) {
  TempDir dir("token_resume");
  const fs::path data = copy_data(dir);
  std::ostringstream log;
  TrainOptions o = small_options(data, dir.path() / "full");
  o.batch_tokens = 60;
  o.steps = 30;  // more than one epoch
  const TrainReport full = train(o, log);
  EXPECT_GT(full.padding_fraction, 0.0);
  EXPECT_NE(log.str().find("padding: "), std::string::npos);
  TrainOptions first = small_options(data, dir.path() / "split");
  first.batch_tokens = 60;
  first.steps = 11;
  train(first, log);
  TrainOptions second = first;
  second.steps = 30;
  second.resume = true;
  const TrainReport resumed = train(second, log);
  ASSERT_EQ(resumed.losses.size(), 19u);
  for (size_t i = 0; i < resumed.losses.size(); ++i)
    EXPECT_EQ(resumed.losses[i], full.losses[11 + i]) << "step " << 12 + i;  // bit for bit
}

// Two accumulated half batches give the losses (and so the updates) of one full batch.
TEST(Accumulation, TwoHalfBatchesEqualOneFullBatchOverTenSteps) {
  TempDir dir("accum");
  const fs::path data = copy_data(dir);  // 64 examples: whole batches in every epoch
  std::ostringstream log;
  TrainOptions full = small_options(data, dir.path() / "full");
  full.dtype = DType::F64;
  full.batch = 16;
  full.steps = 10;
  TrainOptions halves = small_options(data, dir.path() / "halves");
  halves.dtype = DType::F64;
  halves.batch = 8;
  halves.accum = 2;
  halves.steps = 10;
  const TrainReport a = train(full, log);
  const TrainReport b = train(halves, log);
  ASSERT_EQ(a.losses.size(), 10u);
  ASSERT_EQ(b.losses.size(), 10u);
  for (size_t i = 0; i < 10; ++i)
    EXPECT_NEAR(b.losses[i], a.losses[i], 1e-9 * std::abs(a.losses[i])) << "step " << i + 1;
  // The losses move (the model trains), so equal losses mean equal updates.
  EXPECT_NE(a.losses[0], a.losses[9]);
  // Half batches without accumulation take other steps.
  TrainOptions plain = halves;
  plain.accum = 1;
  plain.out_dir = (dir.path() / "plain").string();
  const TrainReport c = train(plain, log);
  EXPECT_GT(std::abs(c.losses[1] - a.losses[1]), 1e-6);
}

}  // namespace
}  // namespace seqtape
