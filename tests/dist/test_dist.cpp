// Data-parallel training over Open MPI, run for real: mpirun starts 2 or 3 ranks of
// dist_worker (train() with test hooks) or of the seqtape binary on loopback, oversubscribed
// on this machine's cores. N ranks must give the model one rank gives with the same global
// batch; a rank that fails, dies or hangs must end the whole job with a message, leaving the
// checkpoint intact. Every child runs under a deadline.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>

#include "io/checkpoint.h"
#include "tests/test_util.h"
#include "train/copy_task.h"

extern char** environ;

namespace seqtape {
namespace {

using test_util::TempDir;
namespace fs = std::filesystem;

struct Ran {
  int code = -1;       // exit code, 128 + signal, or -1 when the deadline killed it
  std::string output;  // stdout and stderr
  double seconds = 0;
};

// Runs argv with stdout and stderr to one file; kills it (and mpirun's ranks with it) at the
// deadline.
Ran run(const std::vector<std::string>& args, double deadline_s) {
  static int counter = 0;
  const std::string log = ::testing::TempDir() + "dist_" + std::to_string(::getpid()) + "_" +
                          std::to_string(counter++) + ".log";
  std::vector<std::string> a = args;
  std::vector<char*> argv;
  for (auto& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawnattr_t at;
  posix_spawnattr_init(&at);
  posix_spawnattr_setflags(&at, POSIX_SPAWN_SETPGROUP);  // its own group, killed as one
  posix_spawnattr_setpgroup(&at, 0);
  pid_t pid = -1;
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = posix_spawn(&pid, argv[0], &fa, &at, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&at);
  Ran r;
  if (rc != 0) {
    r.output = "posix_spawn failed for " + args[0];
    return r;
  }
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (w == pid) {
      r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (r.seconds > deadline_s) {
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      r.code = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::ifstream in(log);
  r.output = std::string(std::istreambuf_iterator<char>(in), {});
  std::remove(log.c_str());
  return r;
}

// mpirun for n ranks on this machine alone: oversubscribed, unbound, shared memory and
// loopback only.
std::vector<std::string> mpirun(int n) {
  std::vector<std::string> a{
      SEQTAPE_MPIEXEC, "-np", std::to_string(n), "--oversubscribe", "--bind-to",          "none",
      "--mca",         "btl", "self,vader",      "--mca",           "oob_tcp_if_include", "lo"};
  if (::geteuid() == 0) a.push_back("--allow-run-as-root");
  return a;
}

std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A copy task of 60 strings in dir/data.
void write_data(const TempDir& dir) {
  CopyTaskOptions co;
  co.n_train = 60;
  co.n_valid = 4;
  co.max_len = 6;
  co.seed = 7;
  write_copy_task(dir.file("data"), generate_copy_task(co), co.alphabet);
}

std::vector<double> read_losses(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

// max |a - b| / max |b|: of the losses, and over all the parameters of two checkpoints taken
// together (the norm-wise relative difference). Not tensor by tensor: the attention key biases
// (bk) get no gradient in exact arithmetic (softmax ignores a constant added to every score),
// so theirs is rounding noise that Adam scales up to steps of about lr, and their values are
// noise of any relative size in every run, one rank or many. In float64 Adam's eps (1e-9) keeps
// that noise (about 1e-17) from moving them; in float32 it does not (the noise is about 1e-8),
// so float32 comparisons leave the key biases out (skip_key_biases).
double rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    num = std::max(num, std::abs(a[i] - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return den > 0 ? num / den : num;
}
double params_rel_diff(const std::string& ckpt_a, const std::string& ckpt_b,
                       bool skip_key_biases = false) {
  const Checkpoint a = load_checkpoint(ckpt_a), b = load_checkpoint(ckpt_b);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.params.size(), b.params.size());
  std::vector<double> all_a, all_b;
  for (size_t i = 0; i < std::min(a.params.size(), b.params.size()); ++i) {
    EXPECT_EQ(a.params[i].name, b.params[i].name);
    if (skip_key_biases && a.params[i].name.ends_with(".bk")) continue;
    for (double v : a.params[i].value.to_vector()) all_a.push_back(v);
    for (double v : b.params[i].value.to_vector()) all_b.push_back(v);
  }
  return rel_diff(all_a, all_b);
}

const double kDeadline = 240;

std::vector<std::string> worker(const TempDir& dir, const std::string& out,
                                const std::vector<std::string>& extra) {
  return std::vector<std::string>{SEQTAPE_DIST_WORKER, "--data", dir.file("data"), "--out",
                                  dir.file(out)} +
         extra;
}

// N ranks against one process on the same global batches (float64): losses and final
// parameters to 1e-9 relative; every bucket verified final when started, and some started
// during backward.
void expect_equivalent(int ranks, const std::vector<std::string>& opts,
                       bool rank0_has_rows = true) {
  TempDir dir("dist");
  write_data(dir);
  const Ran one = run(worker(dir, "one", opts), kDeadline);
  ASSERT_EQ(one.code, 0) << one.output;
  const Ran many = run(mpirun(ranks) + worker(dir, "many", opts), kDeadline);
  ASSERT_EQ(many.code, 0) << many.output;
  const auto l1 = read_losses(dir.file("one/losses.txt")),
             ln = read_losses(dir.file("many/losses.txt"));
  ASSERT_EQ(l1.size(), 10u);
  EXPECT_LT(rel_diff(ln, l1), 1e-9);
  EXPECT_LT(params_rel_diff(dir.file("many/checkpoint.bin"), dir.file("one/checkpoint.bin")), 1e-9);
  EXPECT_NE(many.output.find("data-parallel: " + std::to_string(ranks) + " ranks"),
            std::string::npos)
      << many.output;
  std::ifstream red(dir.file("many/reducer.txt"));
  int64_t buckets = 0, overlapped = 0, steps = 0;
  red >> buckets >> overlapped >> steps;
  EXPECT_GT(buckets, 1);
  EXPECT_EQ(steps, 10);
  const bool overlap = std::find(opts.begin(), opts.end(), "--no-overlap") == opts.end();
  if (overlap && rank0_has_rows)  // the counts are rank 0's
    EXPECT_GT(overlapped, 0);
  else
    EXPECT_EQ(overlapped, 0);
}

TEST(DataParallel, TwoRanksTrainTheModelOneRankTrainsFloat64AdamClipping) {
  expect_equivalent(2, {"--float64"});
}

TEST(DataParallel, ThreeRanksUnevenShardsWithAccumulation) {
  // Batches of 7 rows: shards of 2, 2 and 3; two batches accumulated per step.
  expect_equivalent(3, {"--float64", "--accum", "2"});
}

TEST(DataParallel, WithoutOverlapTheSumsAreTheSame) {
  expect_equivalent(2, {"--float64", "--no-overlap"});
}

TEST(DataParallel, MoreRanksThanRowsLeavesSomeRanksIdle) {
  // A global batch of 2 over 3 ranks: rank 0 has no rows and contributes nothing.
  expect_equivalent(3, {"--float64", "--batch", "2"}, /*rank0_has_rows=*/false);
}

// `seqtape train` of the seed preset on dir's copy task, in global batches of 9, on one thread
// per rank, logging every step; each test adds its own flags.
std::vector<std::string> cli_train(const TempDir& dir, const std::vector<std::string>& extra) {
  return std::vector<std::string>{SEQTAPE_CLI_PATH,
                                  "train",
                                  "--data",
                                  dir.file("data/train.tsv"),
                                  "--valid",
                                  dir.file("data/valid.tsv"),
                                  "--preset",
                                  "seed",
                                  "--batch",
                                  "9",
                                  "--lr",
                                  "0.01",
                                  "--threads",
                                  "1",
                                  "--eval-max",
                                  "0",
                                  "--no-progress",
                                  "--log-every",
                                  "1"} +
         extra;
}

// The training loss of every step in run's metrics.csv.
std::vector<double> train_losses(const TempDir& dir, const std::string& run) {
  std::ifstream in(dir.file(run + "/metrics.csv"));
  std::vector<double> v;
  for (std::string line; std::getline(in, line);)
    if (line.find(",train,") != std::string::npos)
      v.push_back(std::stod(line.substr(line.find(",train,") + 7)));
  return v;
}

// The seqtape command in float32: 2 ranks for 6 steps, resumed with 1 rank to 10, against one
// rank for 10: the saved state does not depend on the world size.
TEST(DataParallel, CliTwoRanksThenResumedWithOneMatchesOneRank) {
  TempDir dir("dist");
  write_data(dir);
  const std::vector<std::string> common = {"--check-sync", "2"};
  const Ran a = run(
      cli_train(dir, common + std::vector<std::string>{"--steps", "10", "--out", dir.file("one")}),
      kDeadline);
  ASSERT_EQ(a.code, 0) << a.output;
  const Ran b1 =
      run(mpirun(2) + cli_train(dir, common + std::vector<std::string>{"--steps", "6", "--out",
                                                                       dir.file("two")}),
          kDeadline);
  ASSERT_EQ(b1.code, 0) << b1.output;
  EXPECT_NE(b1.output.find("data-parallel: 2 ranks"), std::string::npos) << b1.output;
  EXPECT_NE(b1.output.find("allreduce over 2 ranks"), std::string::npos) << b1.output;
  const Ran b2 = run(cli_train(dir, common + std::vector<std::string>{"--steps", "10", "--out",
                                                                      dir.file("two"), "--resume"}),
                     kDeadline);
  ASSERT_EQ(b2.code, 0) << b2.output;
  EXPECT_LT(params_rel_diff(dir.file("two/checkpoint.bin"), dir.file("one/checkpoint.bin"),
                            /*skip_key_biases=*/true),
            1e-5);
  // metrics.csv: steps 1-6 logged by the two ranks, 7-10 by the resumed run.
  const auto la = train_losses(dir, "one"), lb = train_losses(dir, "two");
  ASSERT_EQ(la.size(), 10u);
  EXPECT_LT(rel_diff(lb, la), 1e-5);
}

// `seqtape train --ranks 2` (two threads of one process) against `mpirun -np 2 seqtape train`,
// with dropout: the same shards, the same per-rank masks and the same sums (a + b), so the same
// checkpoint bytes and losses. Under mpirun, --ranks is refused (exit 2).
TEST(DataParallel, CliThreadRanksGiveMpirunsBits) {
  TempDir dir("dist");
  write_data(dir);
  const std::vector<std::string> common{"--dropout", "0.1", "--steps", "6"};
  const Ran mpi =
      run(mpirun(2) + cli_train(dir, common + std::vector<std::string>{"--out", dir.file("mpi")}),
          kDeadline);
  ASSERT_EQ(mpi.code, 0) << mpi.output;
  const Ran threads = run(cli_train(dir, common + std::vector<std::string>{"--ranks", "2", "--out",
                                                                           dir.file("threads")}),
                          kDeadline);
  ASSERT_EQ(threads.code, 0) << threads.output;
  EXPECT_NE(threads.output.find("data-parallel: 2 ranks (threads of one process"),
            std::string::npos)
      << threads.output;
  const std::string a = test_util::read_bytes(dir.file("mpi/checkpoint.bin"));
  EXPECT_FALSE(a.empty());
  EXPECT_TRUE(a == test_util::read_bytes(dir.file("threads/checkpoint.bin")));
  EXPECT_EQ(train_losses(dir, "threads").size(), 6u);
  EXPECT_EQ(train_losses(dir, "threads"), train_losses(dir, "mpi"));  // bit for bit

  const Ran both =
      run(mpirun(2) + cli_train(dir, common + std::vector<std::string>{"--ranks", "2", "--out",
                                                                       dir.file("both")}),
          kDeadline);
  EXPECT_EQ(both.code, 2) << both.output;
  EXPECT_NE(both.output.find("--ranks 2 cannot be combined with mpirun's 2 ranks"),
            std::string::npos)
      << both.output;
}

// Two ranks of dist_worker where rank 1 has `fault` at `step`, checkpoints every 2 steps and
// --check-sync `check_sync`; collectives time out after `timeout` seconds. The job must end
// within a minute, whatever the fault.
Ran run_with_fault(const TempDir& dir, const std::string& fault, int step, int timeout,
                   int check_sync = 0) {
  const Ran r = run(mpirun(2) + worker(dir, "run",
                                       {"--save-every", "2", "--fault", fault, "--fault-step",
                                        std::to_string(step), "--timeout", std::to_string(timeout),
                                        "--check-sync", std::to_string(check_sync)}),
                    kDeadline);
  EXPECT_LT(r.seconds, 60) << r.output;
  return r;
}

// A rank killed mid-run: mpirun ends the job (non-zero, naming the rank), and rank 0's last
// checkpoint (step 4, saved every 2 steps) loads.
TEST(DataParallel, KilledRankEndsTheJobAndTheCheckpointSurvives) {
  TempDir dir("dist");
  write_data(dir);
  const Ran r = run_with_fault(dir, "kill", 5, 60);
  EXPECT_GT(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
  EXPECT_EQ(load_checkpoint(dir.file("run/checkpoint.bin")).step, 4);
}

// A rank whose step fails (bad data, out of memory) says so, naming itself, and stops every
// rank with its exit code.
TEST(DataParallel, FailingRankNamesItselfAndStopsEveryRank) {
  TempDir dir("dist");
  write_data(dir);
  const Ran r = run_with_fault(dir, "error", 3, 60);
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("rank 1 of 2: step 3: injected failure on rank 1"), std::string::npos)
      << r.output;
  EXPECT_EQ(load_checkpoint(dir.file("run/checkpoint.bin")).step, 2);
}

// A rank that hangs: the others give up after --collective-timeout and stop the job.
TEST(DataParallel, HungRankIsBoundedByTheCollectiveTimeout) {
  TempDir dir("dist");
  write_data(dir);
  const Ran r = run_with_fault(dir, "hang", 3, 2);
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("rank 0 of 2: the gradient allreduce at step 3 did not complete within "
                          "--collective-timeout 2 s"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(load_checkpoint(dir.file("run/checkpoint.bin")).step, 2);
}

// --check-sync 2: rank 1 changes a parameter at step 3; the comparison after step 4 names it.
TEST(DataParallel, CheckSyncStopsAtTheFirstCheckAfterDivergence) {
  TempDir dir("dist");
  write_data(dir);
  const Ran r = run_with_fault(dir, "diverge", 3, 60, /*check_sync=*/2);
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("step 4: the parameters of rank 1 ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("differ after the update (--check-sync); the ranks have diverged"),
            std::string::npos)
      << r.output;
}

// Two ranks of the seqtape command in mpirun's MPMD form ("-np 1 A : -np 1 B"), each with the
// common options and its own; the job must end within a minute.
Ran two_commands(const TempDir& dir, const std::vector<std::string>& rank0,
                 const std::vector<std::string>& rank1) {
  auto args = [&](const std::vector<std::string>& own) {
    return std::vector<std::string>{SEQTAPE_CLI_PATH, "train",
                                    "--valid",        dir.file("data/valid.tsv"),
                                    "--vocab",        dir.file("data/vocab.txt"),
                                    "--preset",       "seed",
                                    "--out",          dir.file("run"),
                                    "--no-progress"} +
           own;
  };
  const Ran r = run(
      mpirun(1) + args(rank0) + std::vector<std::string>{":", "-np", "1"} + args(rank1), kDeadline);
  EXPECT_LT(r.seconds, 60) << r.output;
  return r;
}

// Ranks started on different data are refused before the first step, naming the option.
TEST(DataParallel, RanksWithDifferentDataAreRefused) {
  TempDir dir("dist");
  write_data(dir);
  {
    std::ifstream in(dir.file("data/train.tsv"));
    std::string all((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(dir.file("other.tsv")) << all.substr(0, all.find('\n', all.size() / 2) + 1);
  }
  const Ran r = two_commands(dir, {"--data", dir.file("data/train.tsv"), "--steps", "3"},
                             {"--data", dir.file("other.tsv"), "--steps", "3"});
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("the ranks were started with different options or data: rank 1 has "
                          "--data \""),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir.file("run/checkpoint.bin")));
}

// Ranks with different step counts hung: the one that finished first waited in the final
// barrier while the other waited in the next step's allreduce. Refused before the first step.
TEST(DataParallel, RanksWithDifferentStepsAreRefused) {
  TempDir dir("dist");
  write_data(dir);
  const Ran r = two_commands(dir, {"--data", dir.file("data/train.tsv"), "--steps", "3"},
                             {"--data", dir.file("data/train.tsv"), "--steps", "5"});
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("rank 1 has --steps 5 (rank 0: 3)"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("run/checkpoint.bin")));
}

// The ranks stop on rank 0's clock, but a rank without the time limit would train a different
// number of steps (until its own --steps): refused, as is a data file of another name with the
// same contents accepted.
TEST(DataParallel, RanksWithDifferentTimeLimitsAreRefused) {
  TempDir dir("dist");
  write_data(dir);
  fs::copy_file(dir.file("data/train.tsv"), dir.file("copy.tsv"));
  const Ran r = two_commands(
      dir, {"--data", dir.file("data/train.tsv"), "--steps", "3", "--time-limit", "1m"},
      {"--data", dir.file("copy.tsv"), "--steps", "3"});
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("rank 1 has --time-limit 0.0 (rank 0: 60.0)"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("--data"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace seqtape
