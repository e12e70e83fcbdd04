// The model and training settings `seqtape train --time-limit T` chooses when no model is
// given (train/auto_defaults.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "io/checkpoint.h"
#include "model/memory_budget.h"
#include "train/auto_defaults.h"
#include "train/copy_task.h"
#include "train/dist.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

namespace fs = std::filesystem;

AutoInput input(int64_t label_tokens, double seconds, int threads = 2) {
  AutoInput in;
  in.examples = label_tokens / 7;
  in.label_tokens = label_tokens;
  in.seconds = seconds;
  in.threads = threads;
  return in;
}

TEST(AutoDefaults, ModelGrowsWithTheBudgetAndStaysSmallForLittleData) {
  const AutoChoice tiny = choose_auto(input(500, 3600));
  EXPECT_EQ(tiny.model.d_model, 64) << "500 label tokens cannot feed a larger model";
  const AutoChoice half_hour = choose_auto(input(700'000, 1800));
  const AutoChoice day = choose_auto(input(700'000, 86400));
  EXPECT_GT(half_hour.model.d_model, 64);
  EXPECT_EQ(half_hour.batch_tokens, 2048) << "700,000 label tokens fill 64 batches of the largest";
  EXPECT_GT(day.model.d_model, half_hour.model.d_model);
  EXPECT_GE(day.model.n_encoder_layers, half_hour.model.n_encoder_layers);
  const AutoChoice one_thread = choose_auto(input(700'000, 1800, 1));
  EXPECT_LE(one_thread.model.d_model, half_hour.model.d_model);
  for (const AutoChoice* c : {&tiny, &half_hour, &day, &one_thread}) {
    EXPECT_DOUBLE_EQ(c->model.dropout, 0.1);
    EXPECT_EQ(c->model.activation, Activation::Gelu);
    EXPECT_EQ(c->model.d_model % c->model.n_heads, 0);
    EXPECT_GE(c->warmup, 1);
    EXPECT_LE(c->warmup, 400);
    EXPECT_GE(c->batch_tokens, 512);
    EXPECT_LE(c->batch_tokens, kMaxBatchTokens);
    EXPECT_NE(c->summary.find("d_model"), std::string::npos);
    EXPECT_NE(c->summary.find("(gelu)"), std::string::npos) << c->summary;
  }
  // Every rung above the smallest is chosen only when the budget trains it on enough tokens,
  // and the data is large enough for it.
  for (const AutoChoice* c : {&half_hour, &day}) {
    ModelConfig m = c->model;
    m.vocab_size = 64;
    const auto params = static_cast<double>(parameter_count(m));
    EXPECT_GE(c->epochs * 700'000, kMinTokensPerParam * params);
    EXPECT_LE(params, kMaxParamsPerToken * 700'000);
  }
}

TEST(AutoDefaults, TheChoiceIsAFunctionOfItsInputs) {
  const AutoChoice a = choose_auto(input(120'000, 600));
  const AutoChoice b = choose_auto(input(120'000, 600));
  EXPECT_EQ(a.model.to_json(), b.model.to_json());
  EXPECT_EQ(a.warmup, b.warmup);
  EXPECT_EQ(a.summary, b.summary);
}

struct AutoRun {
  fs::path dir = fs::temp_directory_path() / ("seqtape_test_auto_" + std::to_string(::getpid()));
  TrainOptions o;
  explicit AutoRun(int64_t n_train = 64, int64_t max_len = 5,
                   std::vector<std::string> alphabet = default_copy_alphabet()) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    CopyTaskOptions co;
    co.n_train = n_train;
    co.n_valid = 6;
    co.max_len = max_len;
    co.seed = 3;
    co.alphabet = std::move(alphabet);
    write_copy_task(dir.string(), generate_copy_task(co), co.alphabet);
    o.data = (dir / "train.tsv").string();
    o.valid_data = (dir / "valid.tsv").string();
    o.out_dir = (dir / "run").string();
    o.auto_fill = AutoFill{true, true, true, true, true};
    o.progress = 0;
    o.eval_max = 2;
    o.threads = 1;
  }
  ~AutoRun() { fs::remove_all(dir); }
};

// What fill_auto gives choose_auto for a run on `data` (one thread, float32).
AutoInput input_of(const std::string& data, double seconds) {
  AutoInput in{0, 0, seconds, 1, false};
  std::ifstream f(data);
  for (std::string line; std::getline(f, line); ++in.examples)  // ASCII targets: a token a byte
    in.label_tokens += static_cast<int64_t>(line.size() - line.find('\t') - 1) + 1;
  return in;
}

nlohmann::json record_of(const std::string& ckpt) {
  return nlohmann::json::parse(load_checkpoint(ckpt).metrics_json).at("run");
}

// A resumed run keeps the model and warmup its first budget chose: the estimate of another
// budget gives another warmup, and the resume would otherwise be refused for it.
TEST(AutoDefaults, ResumeKeepsTheChoiceOfTheFirstBudget) {
  AutoRun r;
  r.o.time_limit = 0.3;
  std::ostringstream log;
  train(r.o, log);
  EXPECT_NE(log.str().find("chosen for the data and the budget"), std::string::npos) << log.str();
  const std::string ckpt = (fs::path(r.o.out_dir) / "checkpoint.bin").string();
  const nlohmann::json first = record_of(ckpt);
  ASSERT_EQ(first.at("model").at("d_model"), 64);
  EXPECT_EQ(first.at("optimizer").at("schedule").at("kind"), "wsd");
  EXPECT_DOUBLE_EQ(first.at("optimizer").at("label_smoothing").get<double>(), 0.1);

  TrainOptions again = r.o;
  again.resume = true;
  again.time_limit = 1.5;  // another budget, whose own estimate gives another warmup
  const AutoInput in = input_of(r.o.data, again.time_limit);
  ASSERT_NE(first.at("optimizer").at("warmup").get<int64_t>(), choose_auto(in).warmup)
      << "the test needs budgets whose warmups differ";
  std::ostringstream log2;
  EXPECT_NO_THROW(train(again, log2)) << log2.str();
  EXPECT_EQ(record_of(ckpt).at("optimizer"), first.at("optimizer"));
  EXPECT_EQ(record_of(ckpt).at("model"), first.at("model"));
}

// The log's line names the settings the run trains with: one the user gave (here
// --batch-tokens) as given, not the value the defaults would have chosen, and the warmup
// estimated from the given batch's steps.
TEST(AutoDefaults, TheLogNamesTheSettingsTheRunUsesAndWhichWereGiven) {
  AutoRun r;
  r.o.time_limit = 0.3;
  r.o.auto_fill.batch = false;
  r.o.batch_tokens = 96;
  std::ostringstream log;
  train(r.o, log);
  AutoInput in = input_of(r.o.data, r.o.time_limit);
  const AutoChoice chosen = choose_auto(in);
  in.batch_tokens = 96;
  const AutoChoice given = choose_auto(in);
  ASSERT_NE(chosen.batch_tokens, 96) << "the test needs a batch the defaults would not choose";
  EXPECT_NE(chosen.warmup, given.warmup) << "the warmup follows the steps of the given batch";
  const std::string line = "--batch-tokens 96 (given), --label-smoothing 0.1, --warmup " +
                           std::to_string(given.warmup) + ", --schedule wsd";
  EXPECT_NE(log.str().find(line), std::string::npos) << log.str();
  const nlohmann::json rec = record_of((fs::path(r.o.out_dir) / "checkpoint.bin").string());
  EXPECT_EQ(rec.at("optimizer").at("warmup").get<int64_t>(), given.warmup);
  EXPECT_EQ(rec.at("optimizer").at("batch_tokens").get<int64_t>(), 96);
}

// Rank 0 of two ranks whose collectives change nothing (the other rank's values equal this
// one's): enough for train() to run one step as rank 0 of a data-parallel job.
class TwoRanksAlike final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string describe() const override { return "two ranks alike (test)"; }
  void start_sum(void*, int64_t, DType) override {}
  void progress() override {}
  void wait_all(const std::string&) override {}
  std::vector<uint64_t> allgather(uint64_t value, const std::string&) override {
    return {value, value};
  }
  void broadcast(std::string&, int, const std::string&, bool) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override {
    throw std::runtime_error("abort " + std::to_string(code));
  }
};

// Under mpirun the budget's compute is every rank's threads: two ranks of one thread choose the
// model one process of two threads chooses, here d128 where one thread alone would get d64.
TEST(AutoDefaults, RanksCountTheirThreadsTogether) {
  AutoRun r(30'000, 12, {"a", "b", "c", "d", "e", "f", "g", "h"});  // a token a byte (input_of)
  r.o.time_limit = 1500;
  AutoInput in = input_of(r.o.data, r.o.time_limit);
  const AutoChoice one = choose_auto(in);
  in.threads = 2;
  const AutoChoice two = choose_auto(in);
  ASSERT_NE(one.model.d_model, two.model.d_model)
      << "the test needs a budget where a second thread buys the next model";
  r.o.comm = std::make_shared<TwoRanksAlike>();
  r.o.on_step = [](const StepStats&, double) { return true; };  // one step is enough
  std::ostringstream log;
  train(r.o, log);
  const std::string want = "d_model " + std::to_string(two.model.d_model) + ",";
  EXPECT_NE(log.str().find(want), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("on 2 threads of 2 ranks"), std::string::npos) << log.str();
}

}  // namespace
}  // namespace seqtape
