// A save that fails for lack of space reports the error, stops training, and leaves the
// previous checkpoint intact and loadable, with no temp file left behind. Two ways: the
// envelope's injected write fault inside a real training run (at a byte offset and at the
// final fsync), and a real full file system (a small tmpfs, when this process may mount one)
// under the seqtape binary.

#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <sstream>

#include "fault_util.h"
#include "io/checkpoint.h"
#include "io/envelope.h"
#include "train/copy_task.h"
#include "train/trainer.h"

namespace seqtape::faults {
namespace {

std::vector<std::string> temp_files(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos)
      out.push_back(e.path().filename().string());
  return out;
}

// Disarms the process-wide write fault however the test ends.
struct FaultGuard {
  ~FaultGuard() { clear_write_fault_for_testing(); }
};

class InjectedDiskFull : public ::testing::TestWithParam<size_t> {};

TEST_P(InjectedDiskFull, SaveFailsCleanlyAndThePreviousCheckpointSurvives) {
  TempDir dir("diskfull");
  write_small_copy_task(dir, 64, 2);
  TrainOptions o = seed_training(dir, "out", 8);
  o.save_every = 1;
  const size_t fail_after = GetParam();
  // Armed during step 4, before its save: saves 1-3 succeed, save 4 hits the "full disk".
  o.before_backward = [fail_after](int64_t step, TransformerModel&) {
    if (step == 4) set_write_fault_for_testing(fail_after);
  };
  FaultGuard guard;
  std::ostringstream log;
  std::string msg;
  try {
    train(o, log);
    FAIL() << "training went on past a failed save";
  } catch (const Error& e) {
    msg = e.what();
  }
  clear_write_fault_for_testing();
  for (const char* w :
       {"checkpoint.bin", "cannot save", "No space left on device", "previous file is unchanged"})
    EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' in: " << msg;
  EXPECT_NE(msg.find(fail_after > 1'000'000 ? "syncing" : "writing"), std::string::npos) << msg;
  EXPECT_EQ(load_checkpoint(dir.file("out/checkpoint.bin")).step, 3);
  EXPECT_TRUE(temp_files(dir.file("out")).empty());

  // And the run resumes from there once the disk has room again.
  o.before_backward = nullptr;
  o.resume = true;
  const TrainReport r = train(o, log);
  EXPECT_EQ(r.first_step, 4);
  EXPECT_EQ(load_checkpoint(dir.file("out/checkpoint.bin")).step, 8);
}

// 0: nothing fits; 3000: the header and part of the payload; huge: every byte is written and
// the delayed ENOSPC comes from fsync.
INSTANTIATE_TEST_SUITE_P(FailAfterBytes, InjectedDiskFull,
                         ::testing::Values(size_t{0}, size_t{3000}, size_t{1} << 40));

// A small tmpfs mounted for the test (needs root or CAP_SYS_ADMIN; skipped otherwise).
class SmallTmpfs {
 public:
  SmallTmpfs(const fs::path& dir, size_t bytes) : dir_(dir) {
    fs::create_directories(dir_);
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0755";
    mounted_ = ::mount("tmpfs", dir_.c_str(), "tmpfs", 0, opts.c_str()) == 0;
    if (!mounted_) error_ = std::strerror(errno);
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  fs::path dir_;
  bool mounted_ = false;
  std::string error_;
};

// Writes a file until the file system refuses more; returns the bytes written.
size_t fill_up(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 0;
  const std::string chunk(4096, 'x');
  size_t total = 0;
  for (;;) {
    const ssize_t w = ::write(fd, chunk.data(), chunk.size());
    if (w <= 0) break;
    total += static_cast<size_t>(w);
  }
  ::close(fd);
  return total;
}

TEST(RealDiskFull, TrainOnAFullTmpfsReportsTheErrorAndKeepsTheCheckpoint) {
  TempDir dir("tmpfs");
  const CliResult g = run_cli({"gen-copy", "--out", "data", "--train", "64", "--valid", "4",
                               "--max-len", "5", "--seed", "2"},
                              dir.path().string());
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const fs::path mnt = dir.path() / "small";
  SmallTmpfs tmpfs(mnt, 1 << 20);
  if (!tmpfs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << tmpfs.error();

  const std::vector<std::string> args = {"train",
                                         "--data",
                                         "data/train.tsv",
                                         "--valid",
                                         "data/valid.tsv",
                                         "--vocab",
                                         "data/vocab.txt",
                                         "--out",
                                         "small/out",
                                         "--preset",
                                         "seed",
                                         "--batch",
                                         "8",
                                         "--save-every",
                                         "1",
                                         "--eval-max",
                                         "2",
                                         "--no-progress",
                                         "--steps"};
  auto with_steps = [&](const char* n, bool resume) {
    auto a = args;
    a.push_back(n);
    if (resume) a.push_back("--resume");
    return a;
  };
  const CliResult first = run_cli(with_steps("3", false), dir.path().string());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string ckpt = (mnt / "out" / "checkpoint.bin").string();
  const std::string before = read_file(ckpt);
  ASSERT_EQ(load_checkpoint(ckpt).step, 3);

  ASSERT_GT(fill_up((mnt / "filler").string()), 0u);
  const CliResult full = run_cli(with_steps("6", true), dir.path().string());
  EXPECT_EQ(full.exit_code, 3) << full.err;  // a data/environment error, not a crash
  EXPECT_NE(full.err.find("No space left on device"), std::string::npos) << full.err;
  // The resumed run's first write on the full disk is config.json (checked since every write
  // is): the error names that file.
  EXPECT_NE(full.err.find("out/config.json"), std::string::npos) << full.err;
  EXPECT_EQ(read_file(ckpt), before) << "the previous checkpoint changed";
  EXPECT_EQ(load_checkpoint(ckpt).step, 3);
  EXPECT_TRUE(temp_files(mnt / "out").empty());

  // Room again: the run resumes from step 3 and finishes.
  fs::remove(mnt / "filler");
  const CliResult again = run_cli(with_steps("6", true), dir.path().string());
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(load_checkpoint(ckpt).step, 6);
}

}  // namespace
}  // namespace seqtape::faults
