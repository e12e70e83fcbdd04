// Ranks that are threads of one process (train --ranks N, train/dist_threads.cpp): the
// collectives give rank-order sums, a failed or hung rank stops the others with its reason
// instead of leaving them waiting, and a run of two ranks trains what one rank trains.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tests/test_util.h"
#include "tests/train/copy_fixture.h"
#include "train/dist.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

namespace fs = std::filesystem;
using test_util::error_of;

// fn's error message, "" when it returns.
template <typename Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// Runs body(rank) on one thread per rank and joins them; each rank's error message, "" if none.
std::vector<std::string> on_ranks(const std::vector<std::shared_ptr<Communicator>>& ranks,
                                  const std::function<void(Communicator&)>& body) {
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < ranks.size(); ++r)
    threads.emplace_back([&, r] { errors[r] = message_of([&] { body(*ranks[r]); }); });
  for (std::thread& t : threads) t.join();
  return errors;
}

TEST(ThreadRanks, SumsInRankOrderGatherAndBroadcast) {
  const auto ranks = thread_ranks(3);
  // Values whose float sum depends on the order: (1e8 + 1) - 1e8 is 0 in float, where
  // (1e8 - 1e8) + 1 is 1. Each element's sum must be ((rank 0 + rank 1) + rank 2).
  const float v[3][4] = {{1e8f, 1.f, 3.f, -2.f}, {1.f, 1e8f, 0.5f, 7.f}, {-1e8f, -1e8f, 1.f, 1.f}};
  std::vector<std::vector<float>> f(3);
  std::vector<std::vector<double>> d(3);
  std::vector<std::vector<uint64_t>> gathered(3);
  std::vector<std::string> text(3);
  const auto errors = on_ranks(ranks, [&](Communicator& c) {
    const size_t r = static_cast<size_t>(c.rank());
    f[r].assign(v[r], v[r] + 4);
    c.start_sum(f[r].data(), 4, DType::F32);
    c.wait_all("the test's sum");
    d[r] = {0.25 * static_cast<double>(r + 1), 1.0};
    c.sum(d[r].data(), 2, "the test's double sum");
    gathered[r] = c.allgather(10 + r, "the test's gather");
    text[r] = r == 1 ? "from rank 1" : "";
    c.broadcast(text[r], 1, "the test's broadcast");
    c.barrier();
  });
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    for (int i = 0; i < 4; ++i) {
      const float want = (v[0][i] + v[1][i]) + v[2][i];
      EXPECT_EQ(f[r][static_cast<size_t>(i)], want) << "rank " << r << " element " << i;
    }
    EXPECT_EQ(d[r], (std::vector<double>{1.5, 3.0}));
    EXPECT_EQ(gathered[r], (std::vector<uint64_t>{10, 11, 12}));
    EXPECT_EQ(text[r], "from rank 1");
  }
  EXPECT_EQ(f[0][0], 0.f);  // (1e8 + 1) - 1e8: rank order, not (1e8 - 1e8) + 1
}

// Three ranks over buffers longer than one block of the sum, each rank summing its own slice:
// every element is still ((rank 0 + rank 1) + rank 2), on every rank.
TEST(ThreadRanks, LongSumsOfThreeRanksInRankOrder) {
  const auto ranks = thread_ranks(3);
  const size_t n = 10007;
  auto value = [](size_t r, size_t i) {
    const float big[3] = {1e8f, 1.f, -1e8f};
    return (i % 3 == 0 ? big[r] : 0.f) + static_cast<float>((i * 7 + r * 13) % 101) * 0.37f;
  };
  std::vector<std::vector<float>> f(3);
  const auto errors = on_ranks(ranks, [&](Communicator& c) {
    const size_t r = static_cast<size_t>(c.rank());
    f[r].resize(n);
    for (size_t i = 0; i < n; ++i) f[r][i] = value(r, i);
    c.start_sum(f[r].data(), static_cast<int64_t>(n), DType::F32);
    c.wait_all("the test's sum");
  });
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_EQ(errors[r], "") << "rank " << r;
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) wrong += f[r][i] != (value(0, i) + value(1, i)) + value(2, i);
    EXPECT_EQ(wrong, 0u) << "rank " << r;
  }
}

// A rank that fails says why; the others, waiting in a collective without a time limit, wake
// with its reason rather than waiting forever.
TEST(ThreadRanks, AFailedRankWakesTheOthersWithItsReason) {
  const auto ranks = thread_ranks(3);
  for (const auto& c : ranks) c->set_timeout(0);  // no limit: only the failure can end the wait
  const auto errors = on_ranks(ranks, [&](Communicator& c) {
    std::vector<float> x(5, 1.f);
    c.start_sum(x.data(), 5, DType::F32);  // all three meet once
    if (c.rank() == 1) {                   // fails once the others wait in the next sum
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      fail_thread_ranks(c, "rank 1 of 3 failed: the test's fault");
      throw std::runtime_error("the test's fault");
    }
    c.start_sum(x.data(), 5, DType::F32);
  });
  EXPECT_EQ(errors[1], "the test's fault");
  EXPECT_NE(errors[0].find("rank 1 of 3 failed: the test's fault"), std::string::npos) << errors[0];
  EXPECT_NE(errors[2].find("rank 1 of 3 failed: the test's fault"), std::string::npos) << errors[2];
}

// A rank that never arrives: the waiting rank gives up after the timeout, naming itself, the
// collective and the step, and the late rank's next collective fails with the same reason.
TEST(ThreadRanks, AHungRankIsBoundedByTheTimeout) {
  const auto ranks = thread_ranks(2);
  for (const auto& c : ranks) c->set_timeout(0.2);
  ranks[0]->set_step(7);
  const auto errors = on_ranks(ranks, [&](Communicator& c) {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));
      c.allgather(1, "the late rank's gather");
      return;
    }
    c.allgather(0, "the test's gather");
  });
  EXPECT_NE(errors[0].find("rank 0 of 2: the test's gather at step 7 did not complete within "
                           "--collective-timeout"),
            std::string::npos)
      << errors[0];
  EXPECT_EQ(errors[1], errors[0]);
}

// test_trainer's copy task, for `steps` steps in batches of 9 (shards of 4 and 5 rows) on 2
// threads, without dropout unless the test sets it.
TrainOptions ranks_options(const fs::path& data, const fs::path& out, int64_t steps) {
  TrainOptions o = copy_fixture::copy_options(data, out);
  o.model.dropout = 0.0;
  o.batch = 9;
  o.steps = steps;
  o.threads = 2;
  return o;
}

class ThreadRanksTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("seqtape_test_thread_ranks_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "data");
    copy_fixture::write_data(root_ / "data");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

// In float64 without dropout, two ranks (each on half of every batch, the gradients summed)
// train what one rank trains on the whole batches, to rounding.
TEST_F(ThreadRanksTraining, TwoRanksTrainWhatOneRankTrainsInFloat64) {
  std::ostringstream log;
  TrainOptions one = ranks_options(root_ / "data", root_ / "one", 12);
  one.dtype = DType::F64;
  TrainOptions two = one;
  two.out_dir = (root_ / "two").string();
  two.ranks = 2;
  const TrainReport a = train(one, log), b = train(two, log);
  EXPECT_EQ(b.world_size, 2);
  ASSERT_EQ(a.losses.size(), 12u);
  ASSERT_EQ(b.losses.size(), 12u);
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(b.losses[i], a.losses[i], 1e-9 * std::abs(a.losses[i])) << "step " << i + 1;
  EXPECT_NE(a.losses[0], a.losses[11]);
  EXPECT_NEAR(b.valid.loss, a.valid.loss, 1e-9 * std::abs(a.valid.loss));
  EXPECT_NE(log.str().find("data-parallel: 2 ranks (threads of one process"), std::string::npos)
      << log.str();
}

// With dropout (each rank its own masks) in float32: the same options give the same checkpoint
// bytes, and the ranks end with the same parameters (--check-sync compares them every step).
TEST_F(ThreadRanksTraining, TwoRanksWithDropoutAreReproducibleAndAgree) {
  std::ostringstream log;
  std::vector<std::string> bytes;
  for (const char* name : {"a", "b"}) {
    TrainOptions o = ranks_options(root_ / "data", root_ / name, 10);
    o.model.dropout = 0.1;
    o.ranks = 2;
    o.check_sync = 1;
    train(o, log);
    bytes.push_back(test_util::read_bytes((root_ / name / "checkpoint.bin").string()));
  }
  EXPECT_FALSE(bytes[0].empty());
  EXPECT_TRUE(bytes[0] == bytes[1]);
}

// Resumed at step 4 with two ranks again, with dropout: the checkpoint of an uninterrupted run,
// byte for byte (each rank's masks come from the seed, the rank and the step, not from a
// stream that the checkpoint would have to keep per rank).
TEST_F(ThreadRanksTraining, TwoRanksResumeBitIdentically) {
  std::ostringstream log;
  auto options = [&](const char* name, int64_t steps) {
    TrainOptions o = ranks_options(root_ / "data", root_ / name, steps);
    o.model.dropout = 0.1;
    o.ranks = 2;
    return o;
  };
  train(options("whole", 10), log);
  train(options("split", 4), log);
  TrainOptions rest = options("split", 10);
  rest.resume = true;
  const TrainReport r = train(rest, log);
  EXPECT_EQ(r.first_step, 5);
  const std::string whole = test_util::read_bytes((root_ / "whole" / "checkpoint.bin").string());
  EXPECT_FALSE(whole.empty());
  EXPECT_TRUE(whole == test_util::read_bytes((root_ / "split" / "checkpoint.bin").string()));
}

// A rank that throws mid-run (here rank 1, on its own thread, at step 4) stops the run: train()
// returns with that rank's error, named, rather than leaving rank 0 waiting; the checkpoint
// saved at step 2 stays.
TEST_F(ThreadRanksTraining, AFailingRankStopsTheRunNamingItself) {
  std::ostringstream log;
  TrainOptions o = ranks_options(root_ / "data", root_ / "fail", 10);
  o.ranks = 2;
  o.save_every = 2;
  const std::thread::id lead = std::this_thread::get_id();
  o.before_backward = [lead](int64_t step, TransformerModel&) {
    if (step == 4 && std::this_thread::get_id() != lead) throw Error("the test's fault");
  };
  const std::string e = error_of([&] { train(o, log); });
  EXPECT_EQ(e, "rank 1 of 2: the test's fault");
  EXPECT_TRUE(fs::exists(root_ / "fail" / "checkpoint.bin"));
}

TEST_F(ThreadRanksTraining, RanksUnderMpirunAreRefused) {
  std::ostringstream log;
  TrainOptions o = ranks_options(root_ / "data", root_ / "refused", 2);
  o.ranks = 2;
  o.comm = thread_ranks(2)[0];  // stands for mpirun's world of two
  const std::string e = error_of([&] { train(o, log); });
  EXPECT_NE(e.find("--ranks 2 cannot be combined with mpirun's 2 ranks"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(root_ / "refused"));
}

}  // namespace
}  // namespace seqtape
