// Crash-safe saving and exact resume, with the real binary: `seqtape train` saving after every
// step is killed with SIGKILL 50 times: one kill in five at a seeded random moment from start-up
// on, two in five at a random moment of steady training (after the run has logged a step), and
// two in five inside a save, found by stopping the run (SIGSTOP) at random moments until it is
// stopped with its temp file open. After every kill the newest checkpoint loads, its step never
// goes backwards, and at most the killed run's own temp file is left over. Then a resumed run
// finishes, and every loss any of the 51 runs logged equals, bit for bit, the loss of one
// uninterrupted run at that step.

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "fault_util.h"
#include "io/checkpoint.h"
#include "tensor/rng.h"
#include "train/training_log.h"

namespace seqtape::faults {
namespace {

constexpr int kKills = 50;

std::vector<std::string> temp_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("checkpoint.bin.tmp.")) out.push_back(name);
  }
  return out;
}

// step -> loss text of every "train" row of metrics.csv (17 significant digits, so equal text
// means equal doubles). A step logged by several runs must have logged the same loss each
// time; rows cut short by a kill are counted in `partial` and skipped.
struct Losses {
  std::map<int64_t, std::string> by_step;
  int64_t rows = 0, partial = 0, conflicts = 0;
};

// Every whole row has as many fields as train/training_log.h's kMetricsHeader.
const size_t kColumns = 1 + static_cast<size_t>(std::count(
                                kMetricsHeader, kMetricsHeader + std::strlen(kMetricsHeader), ','));

Losses read_losses(const std::string& metrics_csv) {
  Losses l;
  std::istringstream in(read_file(metrics_csv));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    if (line.ends_with(',')) f.push_back("");
    if (f.size() < 2 || f[1] != "train") continue;
    if (f.size() != kColumns) {
      ++l.partial;
      continue;
    }
    ++l.rows;
    const int64_t step = std::stoll(f[0]);
    auto [it, fresh] = l.by_step.emplace(step, f[2]);
    if (!fresh && it->second != f[2]) ++l.conflicts;
  }
  return l;
}

// Waits until the run writing `out_file` has logged a training step ("step N/M ..." at the
// start of a line): from then on it saves after every step. False after `limit`.
bool wait_for_training(const std::string& out_file, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (("\n" + read_file(out_file)).find("\nstep ") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// The start of the temp file names of the run with this pid (write_file_atomic's
// "<path>.tmp.<pid>.<n>").
std::string temp_prefix(pid_t pid) {
  return "checkpoint.bin.tmp." + std::to_string(pid) + ".";
}

bool has_temp_of(const fs::path& dir, pid_t pid) {
  for (const auto& t : temp_files(dir))
    if (t.starts_with(temp_prefix(pid))) return true;
  return false;
}

// Stops the run at random moments (SIGSTOP, then waits until it has stopped) until it is stopped
// inside a save, i.e. with its own temp file present, and returns true with the run still
// stopped. Otherwise lets it go on (SIGCONT) and tries again; false, with the run stopped, after
// `limit`. A stopped run's files cannot change, so a SIGKILL then lands inside that save for
// certain, however short saves are on this machine's file system.
bool stop_inside_a_save(pid_t pid, const fs::path& dir, Rng& rng, std::chrono::seconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng.below(2'001)));
    if (::kill(pid, SIGSTOP) != 0) return false;
    int status = 0;
    while (::waitpid(pid, &status, WUNTRACED) < 0)
      if (errno != EINTR) return false;
    if (!WIFSTOPPED(status)) throw std::runtime_error("the run ended by itself");
    if (has_temp_of(dir, pid)) return true;
    if (std::chrono::steady_clock::now() >= end) return false;
    ::kill(pid, SIGCONT);
  }
}

class KillResume : public ::testing::Test {
 protected:
  void SetUp() override {
    const CliResult g = run_cli({"gen-copy", "--out", "data", "--train", "160", "--valid", "8",
                                 "--max-len", "6", "--seed", "4"},
                                dir_.path().string());
    ASSERT_EQ(g.exit_code, 0) << g.err;
  }

  std::vector<std::string> train_args(const std::string& out, int64_t steps, int64_t save_every,
                                      bool resume) const {
    std::vector<std::string> a = {"train",
                                  "--data",
                                  "data/train.tsv",
                                  "--valid",
                                  "data/valid.tsv",
                                  "--vocab",
                                  "data/vocab.txt",
                                  "--out",
                                  out,
                                  "--preset",
                                  "seed",
                                  "--dropout",
                                  "0.1",  // the RNG state must resume too
                                  "--steps",
                                  std::to_string(steps),
                                  "--batch",
                                  "8",
                                  "--save-every",
                                  std::to_string(save_every),
                                  "--log-every",
                                  "1",
                                  "--eval-max",
                                  "2",
                                  "--threads",
                                  "1",
                                  "--seed",
                                  "5",
                                  "--no-progress"};
    if (resume) a.push_back("--resume");
    return a;
  }

  TempDir dir_{"kill"};
};

TEST_F(KillResume, FiftyKillsLoseNoCheckpointAndResumeIsBitIdentical) {
  const fs::path out = dir_.path() / "run";
  const std::string ckpt = (out / "checkpoint.bin").string();
  Rng rng(20240611);
  // Start-up kills: delays over start-up, the first saves and steady training. The others wait
  // for steady training first (start-up time varies with the machine and the sanitizers), then
  // up to 30 ms, or until the run is caught inside a save.
  auto startup_delay_us = [](Rng& r) { return 2'000 + static_cast<int>(r.below(398'001)); };
  auto steady_delay_us = [](Rng& r) { return static_cast<int>(r.below(30'001)); };
  int64_t last_step = -1;
  int during_save = 0, before_first_save = 0, aimed = 0;
  std::vector<pid_t> killed;
  for (int k = 0; k < kKills; ++k) {
    SCOPED_TRACE("kill " + std::to_string(k + 1));
    const bool resume = fs::exists(ckpt);
    const pid_t pid = spawn_cli(train_args("run", 1'000'000, 1, resume), dir_.path().string(),
                                dir_.file("train.out"), dir_.file("train.err"));
    const bool startup_kill = k % 5 == 4, aimed_kill = k % 5 == 1 || k % 5 == 3;
    if (!startup_kill) {
      EXPECT_TRUE(wait_for_training(dir_.file("train.out"), std::chrono::seconds(120)))
          << "the run logged no step within 120 s: " << read_file(dir_.file("train.err"));
    }
    bool caught = false;
    if (aimed_kill) {
      caught = stop_inside_a_save(pid, out, rng, std::chrono::seconds(20));
      aimed += caught;
    } else {
      std::this_thread::sleep_for(
          std::chrono::microseconds(startup_kill ? startup_delay_us(rng) : steady_delay_us(rng)));
    }
    ASSERT_EQ(::kill(pid, SIGKILL), 0);
    killed.push_back(pid);
    const int code = wait_child(pid);
    ASSERT_EQ(code, 128 + SIGKILL)
        << "the run ended by itself: " << read_file(dir_.file("train.err"));
    if (caught) {
      EXPECT_TRUE(has_temp_of(out, pid)) << "killed inside a save, yet no temp file";
    }

    if (!fs::exists(ckpt)) {
      ASSERT_EQ(last_step, -1) << "a checkpoint that existed is gone";
      ++before_first_save;
      continue;
    }
    Checkpoint c;
    ASSERT_NO_THROW(c = load_checkpoint(ckpt)) << "the newest checkpoint does not load";
    EXPECT_GE(c.step, last_step) << "an older good checkpoint was lost";
    EXPECT_GE(c.step, 1);
    last_step = c.step;
    // A run removes the temp files of dead runs when it starts, so at most one is ever left:
    // the killed run's own (killed inside a save) or, if it was killed before that clean-up,
    // an earlier run's.
    const auto temps = temp_files(out);
    EXPECT_LE(temps.size(), 1u) << temps.size() << " temp files accumulated, e.g. " << temps[0];
    for (const auto& t : temps) {
      bool known = false;
      for (pid_t p : killed) known = known || t.starts_with(temp_prefix(p));
      EXPECT_TRUE(known) << "temp file " << t << " of no run of this test";
      during_save += t.starts_with(temp_prefix(pid));
    }
  }
  ASSERT_GT(last_step, 0) << "no kill came after the first save";
  std::printf(
      "[          ] %d kills: %d inside a save (temp file left; %d aimed there and caught), %d "
      "before the first save; newest checkpoint at step %lld\n",
      kKills, during_save, aimed, before_first_save, static_cast<long long>(last_step));
  EXPECT_GE(aimed, 15) << "too few runs were caught inside a save to test anything";

  // Finish the interrupted run, then train once without interruption to the same step.
  const Losses seen_before = read_losses((out / "metrics.csv").string());
  const int64_t final_step = seen_before.by_step.rbegin()->first + 10;
  const CliResult fin = run_cli(train_args("run", final_step, 1, true), dir_.path().string());
  ASSERT_EQ(fin.exit_code, 0) << fin.err;
  EXPECT_NE(fin.out.find("resumed at step " + std::to_string(last_step)), std::string::npos)
      << fin.out;
  EXPECT_TRUE(temp_files(out).empty()) << "temp files left after a clean run";
  EXPECT_EQ(load_checkpoint(ckpt).step, final_step);

  const CliResult ref =
      run_cli(train_args("ref", final_step, 1'000'000, false), dir_.path().string());
  ASSERT_EQ(ref.exit_code, 0) << ref.err;

  const Losses got = read_losses((out / "metrics.csv").string());
  const Losses want = read_losses((dir_.path() / "ref" / "metrics.csv").string());
  ASSERT_EQ(static_cast<int64_t>(want.by_step.size()), final_step);
  EXPECT_EQ(got.conflicts, 0) << "a step was logged with two different losses";
  // Rows from before the last fresh start were truncated away with metrics.csv; everything
  // after it, across all the kills and resumes, must be there and match.
  ASSERT_FALSE(got.by_step.empty());
  int64_t compared = 0;
  for (const auto& [step, loss] : got.by_step) {
    ASSERT_TRUE(want.by_step.count(step)) << "step " << step;
    EXPECT_EQ(loss, want.by_step.at(step))
        << "loss differs from the uninterrupted run at step " << step;
    ++compared;
  }
  for (int64_t s = last_step + 1; s <= final_step; ++s)
    EXPECT_TRUE(got.by_step.count(s)) << "the resumed run did not log step " << s;
  std::printf(
      "[          ] %lld steps compared bit for bit (%lld rows logged by the %d runs, "
      "%lld cut short by a kill)\n",
      static_cast<long long>(compared), static_cast<long long>(got.rows), kKills + 1,
      static_cast<long long>(got.partial));
}

// SIGTERM (and SIGINT) mid-run: the run saves at the end of the step it is in and exits 143
// (130); --resume then continues with the losses of an uninterrupted run, bit for bit.
TEST_F(KillResume, SigtermSavesThenResumeIsBitIdentical) {
  for (const int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE("signal " + std::to_string(sig));
    const std::string name = "sig" + std::to_string(sig);
    const fs::path out = dir_.path() / name;
    // --save-every far away: only the signal can make the run save before it ends.
    const pid_t pid = spawn_cli(train_args(name, 1'000'000, 1'000'000, false), dir_.path().string(),
                                dir_.file(name + ".out"), dir_.file(name + ".err"));
    // Wait until it has logged a few steps (the handlers are installed before step 1).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    const std::string csv = (out / "metrics.csv").string();
    while ((!fs::exists(csv) || read_losses(csv).rows < 3) &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ASSERT_EQ(::kill(pid, sig), 0);
    const int code = wait_child(pid);
    ASSERT_EQ(code, 128 + sig) << read_file(dir_.file(name + ".err"));
    EXPECT_NE(read_file(dir_.file(name + ".out")).find("stopped by signal"), std::string::npos);
    const int64_t stopped_at = load_checkpoint((out / "checkpoint.bin").string()).step;
    EXPECT_GE(stopped_at, 3);
    const Losses before = read_losses((out / "metrics.csv").string());
    EXPECT_EQ(before.by_step.rbegin()->first, stopped_at) << "the last step run was not saved";

    const int64_t final_step = stopped_at + 6;
    const CliResult fin =
        run_cli(train_args(name, final_step, 1'000'000, true), dir_.path().string());
    ASSERT_EQ(fin.exit_code, 0) << fin.err;
    const CliResult ref =
        run_cli(train_args(name + "_ref", final_step, 1'000'000, false), dir_.path().string());
    ASSERT_EQ(ref.exit_code, 0) << ref.err;
    const Losses got = read_losses((out / "metrics.csv").string());
    const Losses want = read_losses((dir_.path() / (name + "_ref") / "metrics.csv").string());
    ASSERT_EQ(static_cast<int64_t>(got.by_step.size()), final_step);
    EXPECT_EQ(got.conflicts, 0);
    for (const auto& [step, loss] : want.by_step)
      EXPECT_EQ(got.by_step.at(step), loss)
          << "loss differs from the uninterrupted run at step " << step;
  }
}

}  // namespace
}  // namespace seqtape::faults
