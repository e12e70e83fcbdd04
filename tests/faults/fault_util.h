#pragma once
// Helpers for the fault tests: temp directories, whole-file I/O, and running the `seqtape`
// binary as a child process with its exit code and output captured.

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "train/copy_task.h"
#include "train/trainer.h"

#ifndef SEQTAPE_CLI_PATH
#error "SEQTAPE_CLI_PATH must name the seqtape binary (tests/faults/CMakeLists.txt sets it)"
#endif

extern char** environ;

namespace seqtape::faults {

namespace fs = std::filesystem;

// SEQTAPE_CLI_UNDER_TEST=<binary> runs the tests against another build (e.g. to see the new
// rows fail on the code before a fix).
inline const char* cli_path() {
  const char* other = std::getenv("SEQTAPE_CLI_UNDER_TEST");
  return other && *other ? other : SEQTAPE_CLI_PATH;
}

using test_util::TempDir;

// A small copy task in dir/data: n_train strings of at most 5 characters, 4 held out.
inline void write_small_copy_task(const TempDir& dir, int64_t n_train, uint64_t seed) {
  CopyTaskOptions co;
  co.n_train = n_train;
  co.n_valid = 4;
  co.max_len = 5;
  co.seed = seed;
  write_copy_task(dir.file("data"), generate_copy_task(co), co.alphabet);
}

// The seed preset on dir/data (train() sets vocab_size from data/vocab.txt), batches of 8,
// writing to dir/<out>, without progress lines.
inline TrainOptions seed_training(const TempDir& dir, const std::string& out, int64_t steps) {
  TrainOptions o;
  o.data = dir.file("data/train.tsv");
  o.valid_data = dir.file("data/valid.tsv");
  o.vocab = dir.file("data/vocab.txt");
  o.out_dir = dir.file(out);
  o.model = preset("seed", 2);
  o.steps = steps;
  o.batch = 8;
  o.progress = 0;
  return o;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_file(const std::string& path, std::string_view bytes) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

// Starts `seqtape args...` in directory `cwd` with stdout/stderr going to files; returns the
// pid. Nothing but exec happens in the child (posix_spawn), so this is safe from a process
// that has threads.
// With limit_as_kb > 0 it runs under `ulimit -v limit_as_kb` (through /bin/sh), and stdin comes
// from `in_file` (default /dev/null).
inline pid_t spawn_cli(const std::vector<std::string>& args, const std::string& cwd,
                       const std::string& out_file, const std::string& err_file,
                       const std::string& in_file = "/dev/null", long limit_as_kb = 0) {
  std::vector<std::string> argv_s{cli_path()};
  if (limit_as_kb > 0)
    argv_s = {"/bin/sh", "-c",
              "ulimit -v " + std::to_string(limit_as_kb) + " && exec \"$0\" \"$@\"", cli_path()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, in_file.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addchdir_np(&fa, cwd.c_str());
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) throw std::runtime_error(std::string("posix_spawn failed: ") + std::strerror(rc));
  return pid;
}

// The exit code, or 128 + signal number if the child was killed.
inline int wait_child(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid failed");
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs `seqtape args...` in `cwd` to completion, with `stdin_text` on its stdin and, when
// limit_as_kb > 0, an address-space limit.
inline CliResult run_cli(const std::vector<std::string>& args, const std::string& cwd,
                         const std::string& stdin_text = "", long limit_as_kb = 0) {
  static std::atomic<int> counter{0};
  const std::string base =
      (fs::temp_directory_path() /
       ("seqtape_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
          .string();
  write_file(base + ".in", stdin_text);
  CliResult r;
  r.exit_code =
      wait_child(spawn_cli(args, cwd, base + ".out", base + ".err", base + ".in", limit_as_kb));
  r.out = read_file(base + ".out");
  r.err = read_file(base + ".err");
  std::error_code ec;
  fs::remove(base + ".out", ec);
  fs::remove(base + ".err", ec);
  fs::remove(base + ".in", ec);
  return r;
}

}  // namespace seqtape::faults
