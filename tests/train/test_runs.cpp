// Runs that cannot be lost or mixed (train/run_dir.h), and the run's best and last
// checkpoints, early stopping and the time limit (train/trainer.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "eval/metrics.h"
#include "io/checkpoint.h"
#include "io/envelope.h"
#include "tensor/rng.h"
#include "tests/test_util.h"
#include "train/copy_task.h"
#include "train/dataset.h"
#include "train/run_dir.h"
#include "train/run_options.h"
#include "train/trainer.h"
#include "train/training_log.h"

namespace seqtape {
namespace {

namespace fs = std::filesystem;
using test_util::error_of;

fs::path temp_dir(const std::string& name) {
  fs::path d =
      fs::temp_directory_path() / ("seqtape_test_runs_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

struct CopyRun {
  fs::path data, out;
  TrainOptions o;
  explicit CopyRun(const std::string& name)
      : data(temp_dir(name + "_data")), out(temp_dir(name) / "run") {
    CopyTaskOptions co;
    co.n_train = 64;
    co.n_valid = 6;
    co.max_len = 5;
    co.seed = 3;
    write_copy_task(data.string(), generate_copy_task(co), co.alphabet);
    o.data = (data / "train.tsv").string();
    o.valid_data = (data / "valid.tsv").string();
    o.vocab = (data / "vocab.txt").string();
    o.out_dir = out.string();
    o.model = preset("default", 2);
    o.model.d_model = 16;
    o.model.n_heads = 2;
    o.model.d_ff = 32;
    o.model.n_encoder_layers = o.model.n_decoder_layers = 1;
    o.batch = 8;
    o.steps = 4;
    o.schedule.lr = 3e-3;
    o.progress = 0;
    o.eval_max = 3;
    o.seed = 7;
  }
  ~CopyRun() {
    fs::remove_all(data);
    fs::remove_all(out.parent_path());
  }
  TrainReport run(const TrainOptions& opt) {
    std::ostringstream log;
    return train(opt, log);
  }
};

TEST(RunDir, RefusesAnOutThatHoldsARunUnlessResumeOrOverwrite) {
  CopyRun r("refuse");
  r.run(r.o);
  const std::string msg = error_of([&] { r.run(r.o); });
  EXPECT_HAS(msg, "already holds a run");
  EXPECT_HAS(msg, "--overwrite");
  EXPECT_EQ(load_checkpoint((r.out / "checkpoint.bin").string()).step, 4);  // untouched
  TrainOptions over = r.o;
  over.overwrite = true;
  over.steps = 2;
  EXPECT_EQ(r.run(over).last_step, 2);
  EXPECT_EQ(load_checkpoint((r.out / "checkpoint.bin").string()).step, 2);
  TrainOptions resume = r.o;
  resume.resume = true;
  resume.steps = 5;  // the schedule length may change
  EXPECT_EQ(r.run(resume).first_step, 3);
}

TEST(RunDir, ASecondWriterStopsAtTheLockNamingIt) {
  CopyRun r("lock");
  const RunDir held(r.out.string(), false, false);  // another "process" writing the run
  const std::string msg = error_of([&] { r.run(r.o); });
  EXPECT_HAS(msg, ".seqtape.lock");
  EXPECT_HAS(msg, "another seqtape process");
  EXPECT_FALSE(fs::exists(r.out / "checkpoint.bin"));
  EXPECT_FALSE(fs::exists(r.out / "metrics.csv"));
}

TEST(RunDir, ResumeWithChangedOptionsOrDataNamesEachDifference) {
  CopyRun r("changed");
  r.run(r.o);
  TrainOptions changed = r.o;
  changed.resume = true;
  changed.steps = 8;
  changed.batch = 4;
  changed.schedule.lr = 1e-3;
  changed.model.d_ff = 64;
  std::ofstream(r.data / "valid.tsv", std::ios::app) << "ab\tab\n";
  const std::string msg = error_of([&] { r.run(changed); });
  EXPECT_HAS(msg, "checkpoint.bin");
  EXPECT_HAS(msg, "4 differences");
  EXPECT_HAS(msg, "--batch was 8, now 4");
  EXPECT_HAS(msg, "--lr was 0.003, now 0.001");
  EXPECT_HAS(msg, "--ffn (model d_ff) was 32, now 64");
  EXPECT_HAS(msg, "--valid was");
  EXPECT_EQ(load_checkpoint((r.out / "checkpoint.bin").string()).step, 4);
}

TEST(RunDir, ResumeWithAnotherVocabularyIsRefused) {
  CopyRun r("vocab");
  r.run(r.o);
  std::ofstream(r.data / "vocab.txt", std::ios::app) << "extra\n";
  TrainOptions again = r.o;
  again.resume = true;
  const std::string msg = error_of([&] { r.run(again); });
  EXPECT_HAS(msg, "--vocab was");
  EXPECT_HAS(msg, "model vocab_size (in --config) was");
}

// Each option a resume keeps, changed alone: refused before anything is written, naming the
// option and both values (the batch mode and accumulation were accepted silently, and a switch
// from --batch to --batch-tokens blamed "--data, --valid and --seed").
TEST(RunDir, ResumeRefusesEachKeptOptionNamingItAndBothValues) {
  CopyRun r("kept");
  r.run(r.o);
  const std::string metrics = test_util::read_bytes((r.out / "metrics.csv").string());
  const std::vector<std::pair<std::function<void(TrainOptions&)>, std::string>> changes = {
      {[](TrainOptions& o) { o.batch_tokens = 64; }, "--batch-tokens was 0, now 64"},
      {[](TrainOptions& o) { o.accum = 2; }, "--accum was 1, now 2"},
      {[](TrainOptions& o) { o.too_long = TooLong::kSkip; },
       "--too-long was \"error\", now \"skip\""},
      {[](TrainOptions& o) { o.optim.kind = "adamw"; }, "--optimizer was \"adam\", now \"adamw\""},
      {[](TrainOptions& o) { o.optim.weight_decay = 0.01; }, "--weight-decay was 0.0, now 0.01"},
      {[](TrainOptions& o) { o.optim.beta2 = 0.999; }, "beta2 was 0.98, now 0.999"},
      {[](TrainOptions& o) { o.schedule.warmup = 10; }, "--warmup was 0, now 10"},
      {[](TrainOptions& o) { o.clip = 0.5; }, "--clip was 1.0, now 0.5"},
      {[](TrainOptions& o) { o.label_smoothing = 0.1; }, "--label-smoothing was 0.0, now 0.1"},
      {[](TrainOptions& o) { o.seed = 8; }, "--seed was 7, now 8"},
      {[](TrainOptions& o) { o.model.dropout = 0.2; },
       "--dropout (model dropout) was 0.0, now 0.2"},
      {[](TrainOptions& o) { o.model.attention_dropout = 0.1; },
       "--attention-dropout (model attention_dropout) was null, now 0.1"},
      {[](TrainOptions& o) { o.schedule.kind = LrSchedule::Kind::Wsd; },
       "--schedule was \"constant\", now \"wsd\""},
      {[](TrainOptions& o) { o.schedule.min_lr = 1e-4; }, "--min-lr was 0.0, now 0.0001"},
      {[](TrainOptions& o) { o.tgt_tokenizer = "words"; },
       "--tokenizer/--src-tokenizer/--tgt-tokenizer was \"chars\", now \"chars/words\""},
  };
  for (const auto& [change, named] : changes) {
    TrainOptions o = r.o;
    o.resume = true;
    o.steps = 6;
    change(o);
    const std::string msg = error_of([&] { r.run(o); });
    EXPECT_HAS(msg, "(1 difference): " + named);
    EXPECT_EQ(msg.find("--data, --valid and --seed"), std::string::npos) << msg;
  }
  EXPECT_EQ(load_checkpoint((r.out / "checkpoint.bin").string()).step, 4);
  EXPECT_EQ(test_util::read_bytes((r.out / "metrics.csv").string()), metrics);
}

// What may change on resume: the length of the run, how often to log, evaluate and save, and
// how to compute.
TEST(RunDir, ResumeAcceptsTheOptionsItMayChange) {
  CopyRun r("free");
  r.run(r.o);
  TrainOptions o = r.o;
  o.resume = true;
  o.steps = 6;
  o.log_every = 1;
  o.eval_every = 5;
  o.save_every = 1;
  o.keep_last = 1;
  o.threads = 1;
  o.eval_max = 1;  // no --best-metric: the evaluation's size does not matter to the run
  EXPECT_EQ(r.run(o).first_step, 5);
  EXPECT_TRUE(fs::exists(r.out / "checkpoint-6.bin"));
}

// Every row of the table answers both questions, and the record keeps exactly the kept rows.
TEST(RunDir, TheRecordHoldsTheKeptOptionsAndTheRanksCompareTheAgreedOnes) {
  CopyRun r("table");
  const nlohmann::json values = option_values(r.o, r.o.model.to_json(), "v");
  const nlohmann::json record = run_record(values);
  EXPECT_EQ(record.at("optimizer").at("batch_tokens"), 0);
  EXPECT_EQ(record.at("data").at("too_long"), "error");
  EXPECT_FALSE(record.dump().find("steps") != std::string::npos);  // may change on resume
  const nlohmann::json ranks = rank_record(values);
  EXPECT_EQ(ranks.at("--steps"), 4);
  EXPECT_EQ(ranks.at("--time-limit"), 0.0);
  EXPECT_FALSE(ranks.contains("--threads"));
  TrainOptions other = r.o;
  other.steps = 5;
  other.bucket_bytes = 1 << 20;
  EXPECT_EQ(rank_differences(ranks, option_values(other, r.o.model.to_json(), "v")),
            "--steps 5 (rank 0: 4), --bucket-mb 1.0 (rank 0: 4.0)");
  EXPECT_EQ(rank_differences(ranks, values), "");
  EXPECT_HAS(per_process_flags(), "--threads");
}

// A checkpoint whose record predates an option (here: no batch_tokens, accum, too_long) still
// resumes: what it did not record is not compared.
TEST(RunDir, ARecordWithoutAnOptionDoesNotCompareIt) {
  CopyRun r("old_record");
  r.run(r.o);
  Checkpoint c = load_checkpoint((r.out / "checkpoint.bin").string());
  nlohmann::json m = nlohmann::json::parse(c.metrics_json);
  for (const char* k : {"batch_tokens", "accum"}) m["run"]["optimizer"].erase(k);
  m["run"]["data"].erase("too_long");
  c.metrics_json = m.dump();
  save_checkpoint((r.out / "checkpoint.bin").string(), c);
  TrainOptions o = r.o;
  o.resume = true;
  o.steps = 5;
  EXPECT_EQ(r.run(o).first_step, 5);
}

// --overwrite removes what the replaced run wrote (its periodic and best checkpoints, metrics,
// plot), so that `average run/checkpoint-*.bin` cannot mix two runs; and nothing else.
TEST(RunDir, OverwriteRemovesTheReplacedRunsFilesAndNothingElse) {
  CopyRun r("overwrite");
  TrainOptions first = r.o;
  first.steps = 6;
  first.eval_every = 2;
  first.save_every = 2;
  first.keep_last = 2;
  first.best_metric = "loss";
  r.run(first);
  ASSERT_TRUE(fs::exists(r.out / "checkpoint-4.bin"));
  ASSERT_TRUE(fs::exists(r.out / "best.bin"));
  ASSERT_TRUE(fs::exists(r.out / "loss.svg"));
  // The user's files, two of them under names a run uses but not seqtape's.
  std::ofstream(r.out / "notes.txt") << "mine\n";
  std::ofstream(r.out / "checkpoint-9.bin") << "not a seqtape checkpoint\n";
  std::ofstream(r.out / "metrics.csv.bak") << "step,kind,loss\n";
  // A new run refused by its data leaves the old run as it was.
  TrainOptions bad = r.o;
  bad.overwrite = true;
  bad.valid_data = (r.data / "missing.tsv").string();
  error_of([&] { r.run(bad); });
  EXPECT_TRUE(fs::exists(r.out / "checkpoint-6.bin"));
  EXPECT_TRUE(fs::exists(r.out / "best.bin"));
  TrainOptions over = r.o;
  over.overwrite = true;
  over.steps = 2;
  std::ostringstream log;
  train(over, log);
  EXPECT_HAS(log.str(),
             "--overwrite: removed the replaced run's best.bin, checkpoint-4.bin, "
             "checkpoint-6.bin, checkpoint.bin, metrics.csv, loss.svg");
  for (const char* gone : {"checkpoint-4.bin", "checkpoint-6.bin", "best.bin"})
    EXPECT_FALSE(fs::exists(r.out / gone)) << gone;
  EXPECT_EQ(load_checkpoint((r.out / "checkpoint.bin").string()).step, 2);
  const std::string metrics = test_util::read_bytes((r.out / "metrics.csv").string());
  EXPECT_EQ(metrics.find("\n6,"), std::string::npos) << metrics;  // only the new run's rows
  for (const char* kept : {"notes.txt", "checkpoint-9.bin", "metrics.csv.bak"})
    EXPECT_TRUE(fs::exists(r.out / kept)) << kept;
}

// A run killed before its first checkpoint.bin may have left best.bin: the directory holds a run.
TEST(RunDir, ABestBinAloneIsARunToResumeOrOverwrite) {
  CopyRun r("best_only");
  r.run(r.o);
  fs::rename(r.out / "checkpoint.bin", r.out / "best.bin");
  const std::string msg = error_of([&] { r.run(r.o); });
  EXPECT_HAS(msg, "already holds a run");
  EXPECT_HAS(msg, "best.bin");
  TrainOptions over = r.o;
  over.overwrite = true;
  r.run(over);
  EXPECT_FALSE(fs::exists(r.out / "best.bin"));
}

TEST(BestCheckpoint, BestBinAndTheLastNStepCheckpoints) {
  CopyRun r("best");
  TrainOptions o = r.o;
  o.steps = 10;
  o.eval_every = 2;
  o.save_every = 2;
  o.keep_last = 2;
  o.best_metric = "loss";
  const TrainReport rep = r.run(o);
  ASSERT_GE(rep.best_step, 2);
  const Checkpoint best = load_checkpoint((r.out / "best.bin").string());
  EXPECT_EQ(best.step, rep.best_step);
  EXPECT_TRUE(fs::exists(r.out / "checkpoint-8.bin"));
  EXPECT_TRUE(fs::exists(r.out / "checkpoint-10.bin"));
  EXPECT_FALSE(fs::exists(r.out / "checkpoint-6.bin"));
  EXPECT_FALSE(fs::exists(r.out / "checkpoint-2.bin"));
  EXPECT_EQ(load_checkpoint((r.out / "checkpoint-8.bin").string()).step, 8);
  // metrics.csv has a validation row per evaluation with the new columns.
  std::ifstream in(r.out / "metrics.csv");
  int valid_rows = 0;
  for (std::string line; std::getline(in, line);)
    valid_rows += line.find(",valid,") != std::string::npos;
  EXPECT_EQ(valid_rows, 5);  // steps 2, 4, 6, 8 and the final evaluation at 10
}

TEST(BestCheckpoint, PatienceStopsAfterNEvaluationsWithoutImprovement) {
  CopyRun r("patience");
  TrainOptions o = r.o;
  o.steps = 40;
  o.eval_every = 2;
  o.schedule.lr = 1e-12;  // nothing is learned: exact match stays where it starts
  o.best_metric = "exact";
  o.patience = 2;
  const TrainReport rep = r.run(o);
  EXPECT_TRUE(rep.early_stopped);
  EXPECT_EQ(rep.best_step, 2);
  EXPECT_EQ(rep.last_step, 6);  // evaluations at 4 and 6 did not improve on 2
  EXPECT_EQ(load_checkpoint((r.out / "checkpoint.bin").string()).step, 6);
}

TEST(BestCheckpoint, TimeLimitStopsThenSavesAndEvaluates) {
  CopyRun r("time");
  TrainOptions o = r.o;
  o.steps = 1000;
  o.time_limit = 1e-9;  // reached after the first step
  const TrainReport rep = r.run(o);
  EXPECT_TRUE(rep.timed_out);
  EXPECT_EQ(rep.last_step, 1);
  EXPECT_EQ(load_checkpoint((r.out / "checkpoint.bin").string()).step, 1);
  EXPECT_EQ(rep.valid.examples, 3);  // evaluated
}

// --time-limit alone (no --steps, no --epochs) sets the length of the run.
TEST(BestCheckpoint, TimeLimitAloneRunsUntilTheLimit) {
  CopyRun r("time_alone");
  TrainOptions o = r.o;
  o.steps = 0;
  o.epochs = 0;
  o.time_limit = 0.3;
  const TrainReport rep = r.run(o);
  EXPECT_TRUE(rep.timed_out);
  EXPECT_GT(rep.last_step, 1);
  EXPECT_LT(rep.last_step, TrainOptions::kMaxSteps);
  EXPECT_EQ(load_checkpoint((r.out / "checkpoint.bin").string()).step, rep.last_step);
}

// A budget schedule keyed to --steps: deterministic, and a resumed run continues it.
TEST(BudgetSchedule, KeyedToStepsEndsAtTheFloorAndResumesTheSameCurve) {
  CopyRun whole("wsd_whole"), parts("wsd_parts");
  for (CopyRun* r : {&whole, &parts}) {
    r->o.steps = 8;
    r->o.schedule = {LrSchedule::Kind::Wsd, 3e-3, 2, 0.5, 1e-4};
  }
  const TrainReport all = whole.run(whole.o);
  ASSERT_EQ(all.lrs.size(), 8u);
  EXPECT_DOUBLE_EQ(all.lrs[1], 3e-3);      // end of warmup
  EXPECT_DOUBLE_EQ(all.lrs[3], 3e-3);      // stable
  EXPECT_LT(all.lrs[5], 3e-3);             // decaying
  EXPECT_DOUBLE_EQ(all.lrs.back(), 1e-4);  // the floor at the last step
  TrainOptions first = parts.o;
  first.time_limit = 1e-9;  // stops after the first step, which it saves
  EXPECT_EQ(parts.run(first).last_step, 1);
  TrainOptions rest = parts.o;
  rest.resume = true;
  const TrainReport resumed = parts.run(rest);
  ASSERT_EQ(resumed.lrs.size(), 7u);
  EXPECT_EQ(resumed.lrs, std::vector<double>(all.lrs.begin() + 1, all.lrs.end()));
  EXPECT_EQ(resumed.losses, std::vector<double>(all.losses.begin() + 1, all.losses.end()));
}

// Keyed to --time-limit alone: the rate follows the wall clock down to the floor, the checkpoint
// keeps the run's time, and a run stopped half-way resumes where the curve was, for the time left.
TEST(BudgetSchedule, KeyedToTheTimeLimitEndsAtTheFloorAndResumesMidCurve) {
  CopyRun r("wsd_time");
  TrainOptions o = r.o;
  o.steps = 0;
  o.time_limit = 1.0;
  o.save_every = 0;
  o.schedule = {LrSchedule::Kind::Linear, 3e-3, 0, 0.2, 1e-4};
  const auto t0 = std::chrono::steady_clock::now();
  o.before_backward = [t0](int64_t, TransformerModel&) {  // a Ctrl-C 60% into the budget
    if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(600)) ::raise(SIGINT);
  };
  const TrainReport first = r.run(o);
  ASSERT_EQ(first.stop_signal, SIGINT);
  ASSERT_GT(first.lrs.size(), 2u);
  EXPECT_LT(first.lrs.back(), 0.5 * 3e-3);
  const auto stored =
      nlohmann::json::parse(load_checkpoint((r.out / "checkpoint.bin").string()).metrics_json);
  EXPECT_GT(stored.at("seconds").get<double>(), 0.5);
  TrainOptions again = o;
  again.before_backward = nullptr;
  again.resume = true;
  const TrainReport rest = r.run(again);
  EXPECT_TRUE(rest.timed_out);
  ASSERT_FALSE(rest.lrs.empty());
  EXPECT_LT(rest.lrs.front(), 0.5 * 3e-3);  // the curve goes on, not from the top
  EXPECT_LT(rest.seconds, 0.7);             // only the time the budget has left
  for (size_t i = 1; i < rest.lrs.size(); ++i) EXPECT_LE(rest.lrs[i], rest.lrs[i - 1]);
  // The last step predicts its end from the one before, so it lands at (or within a step's
  // share of the budget above) the floor.
  EXPECT_LT(rest.lrs.back(), 1e-4 + 0.05 * (3e-3 - 1e-4));
}

// --average-last 3: average.bin holds the mean of the last three step checkpoints' weights.
TEST(BestCheckpoint, AverageLastWritesTheMeanOfTheLastCheckpoints) {
  CopyRun r("average");
  TrainOptions o = r.o;
  o.steps = 8;
  o.save_every = 2;
  o.average_last = 3;
  const TrainReport rep = r.run(o);
  EXPECT_EQ(rep.average, (r.out / "average.bin").string());
  const Checkpoint avg = load_checkpoint((r.out / "average.bin").string());
  EXPECT_EQ(avg.step, 8);
  EXPECT_TRUE(avg.optimizer_state.empty());
  std::vector<Checkpoint> last;
  for (int step : {4, 6, 8})
    last.push_back(
        load_checkpoint((r.out / ("checkpoint-" + std::to_string(step) + ".bin")).string()));
  EXPECT_FALSE(fs::exists(r.out / "checkpoint-2.bin"));  // at least 3 kept, no more
  ASSERT_EQ(avg.params.size(), last[0].params.size());
  for (size_t i = 0; i < avg.params.size(); ++i) {
    const std::vector<double> got = avg.params[i].value.to_vector();
    const std::vector<double> a = last[0].params[i].value.to_vector(),
                              b = last[1].params[i].value.to_vector(),
                              c = last[2].params[i].value.to_vector();
    for (size_t j = 0; j < got.size(); ++j) {
      const double want = (a[j] + b[j] + c[j]) / 3;
      ASSERT_NEAR(got[j], want, 1e-6 * (1 + std::abs(want)))
          << avg.params[i].name << "[" << j << "]";
    }
  }
}

TEST(BestCheckpoint, AMetricTheRunCannotComputeIsRefused) {
  TrainOptions o;
  o.best_metric = "loss";
  EXPECT_HAS(best_metric_problem(o), "--eval-every");
  o.eval_every = 5;
  EXPECT_EQ(best_metric_problem(o), "");
  o.best_metric = "accuracy";
  EXPECT_HAS(best_metric_problem(o), "one of loss, chrf, bleu, exact, ter, wer, per, cer");
  for (const char* m : {"ter", "wer", "per", "cer"}) {
    o.best_metric = m;
    EXPECT_EQ(best_metric_problem(o), "") << m;
  }
  o.best_metric = "chrf";
  o.eval_max = 0;
  EXPECT_HAS(best_metric_problem(o), "--eval-max 0");
  o.best_metric = "";
  o.patience = 3;
  EXPECT_HAS(best_metric_problem(o), "--patience needs --best-metric");
}

// The error rates keep best.bin by the lowest value: with nothing learned every evaluation is
// the same, so the first stays the best, and its value (negated, larger is better) is the PER.
TEST(BestCheckpoint, ErrorRatesAreLowerIsBetter) {
  CopyRun r("best_per");
  TrainOptions o = r.o;
  o.steps = 6;
  o.eval_every = 2;
  o.schedule.lr = 1e-12;
  o.best_metric = "per";
  const TrainReport rep = r.run(o);
  ASSERT_GT(rep.valid.per, 0.0) << "an untrained model gets some symbols wrong";
  EXPECT_EQ(rep.best_step, 2);
  EXPECT_DOUBLE_EQ(rep.best_value, -rep.valid.per);
}

// Consecutive validation lines with one source are one source with several references: decoded
// once and scored against all of them. A source that comes back after another one in --valid
// is refused before training, naming both lines.
TEST(Evaluation, ConsecutiveLinesWithOneSourceAreOneSource) {
  CopyRun r("grouped");
  std::vector<TextPair> valid = read_tsv(r.o.valid_data);
  ASSERT_EQ(valid.size(), 6u);
  std::vector<TextPair> grouped{
      valid[0], {valid[0].source, valid[1].target}, {valid[0].source, valid[2].target}};
  grouped.insert(grouped.end(), valid.begin() + 1, valid.end());
  write_tsv(r.o.valid_data, grouped);
  TrainOptions o = r.o;
  o.eval_max = 100;
  const TrainReport rep = r.run(o);
  EXPECT_EQ(rep.valid.examples, 6);  // sources, not the 8 lines
  ASSERT_EQ(rep.valid.hypotheses.size(), 6u);
  metrics::CorpusMetrics want;
  want.add(rep.valid.hypotheses[0],
           std::vector<std::string>{valid[0].target, valid[1].target, valid[2].target});
  for (size_t k = 1; k < 6; ++k) want.add(rep.valid.hypotheses[k], valid[k].target);
  const metrics::EvalSummary w = want.summary();
  EXPECT_DOUBLE_EQ(rep.valid.chrf, w.chrf);
  EXPECT_DOUBLE_EQ(rep.valid.ter, w.ter);
  EXPECT_DOUBLE_EQ(rep.valid.per, w.per);
  EXPECT_DOUBLE_EQ(rep.valid.cer, w.cer);
  EXPECT_DOUBLE_EQ(rep.valid.wer, w.wer);

  std::vector<TextPair> split{valid[0], valid[1], {valid[0].source, valid[2].target}};
  write_tsv(r.o.valid_data, split);
  o.overwrite = true;
  const std::string msg = error_of([&] { r.run(o); });
  EXPECT_HAS(msg, "valid.tsv:3");
  EXPECT_HAS(msg, "first at line 1");
  EXPECT_HAS(msg, "consecutive");
}

// The project's own distributions (tensor/rng.h): these numbers are the same under any
// standard library (they are also what libstdc++'s distributions give for these seeds).
TEST(Rng, ASeedGivesTheSameNumbersUnderAnyStandardLibrary) {
  Rng r(1);
  EXPECT_EQ(r.normal(), -0.38683176162103994);
  EXPECT_EQ(r.normal(), 0.68682363917932543);
  EXPECT_EQ(r.below(10), 4u);
  EXPECT_EQ(r.below(1000003), 74425u);
  EXPECT_EQ(r.below(0), 0u);
  // below() is uniform: 60000 draws over 6 values land within 2% of 10000 each.
  Rng u(5);
  int count[6] = {};
  for (int i = 0; i < 60000; ++i) ++count[u.below(6)];
  for (int c : count) EXPECT_NEAR(c, 10000, 200);
}

TEST(Rng, NoStandardLibraryDistributionIsUsedAnywhere) {
  const std::string std_prefix = "std::";
  const std::vector<std::string> names = {"uniform_int_distribution", "uniform_real_distribution",
                                          "normal_distribution",      "bernoulli_distribution",
                                          "discrete_distribution",    "std::shuffle"};
  int scanned = 0;
  for (const char* dir :
       {"autograd", "nn", "train", "infer", "cli", "tests", "bench", "fuzz", "reference", "web"}) {
    const fs::path root = fs::path(SEQTAPE_SOURCE_DIR) / dir;
    if (!fs::exists(root)) continue;
    for (const auto& e : fs::recursive_directory_iterator(root)) {
      const std::string ext = e.path().extension().string();
      if (ext != ".cpp" && ext != ".h") continue;
      std::ifstream in(e.path());
      const std::string text((std::istreambuf_iterator<char>(in)), {});
      ++scanned;
      for (const std::string& n : names) {
        const std::string use = n.starts_with(std_prefix) ? n + "(" : std_prefix + n + "<";
        EXPECT_EQ(text.find(use), std::string::npos) << e.path() << " uses " << use;
      }
    }
  }
  EXPECT_GT(scanned, 50);
}

}  // namespace
}  // namespace seqtape

namespace seqtape {
namespace {

// Every write is checked: metrics.csv on a full disk (/dev/full) and loss.svg with the
// injected write fault are Errors naming the file, never a silent empty file.
TEST(CheckedWrites, MetricsCsvOnAFullDiskIsAnErrorNamingIt) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const fs::path out = temp_dir("devfull");
  fs::create_symlink("/dev/full", out / "metrics.csv");
  std::ostringstream log;
  const std::string msg = error_of([&] {
    TrainingLog tl(out.string(), true, false, 1, 1, 3, log);
    tl.step({1, 1.0, 0.1, 0.5, 10});
  });
  EXPECT_HAS(msg, "metrics.csv");
  EXPECT_HAS(msg, "write failed");
  fs::remove_all(out);
}

TEST(CheckedWrites, LossSvgThatCannotBeWrittenIsAnErrorNamingIt) {
  const fs::path out = temp_dir("svgfail");
  std::ostringstream log;
  TrainingLog tl(out.string(), false, false, 1, 1, 1, log);
  tl.step({1, 1.0, 0.1, 0.5, 10});
  set_write_fault_for_testing(0);
  const std::string msg = error_of([&] { tl.finish(); });
  clear_write_fault_for_testing();
  EXPECT_HAS(msg, "loss.svg");
  EXPECT_FALSE(fs::exists(out / "loss.svg"));
  fs::remove_all(out);
}

}  // namespace
}  // namespace seqtape
