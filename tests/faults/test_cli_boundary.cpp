// The command boundary (cli/run_cli.cpp): how a command ends becomes an exit code and one line
// on stderr. Out of memory is the user's to change (exit 3), never an abort or "internal error".

#include <gtest/gtest.h>

#include <iostream>
#include <new>
#include <sstream>

#include "cli/commands.h"
#include "nn/memory_budget.h"

namespace seqtape::cli {
namespace {

struct CapturedStderr {
  std::ostringstream buf;
  std::streambuf* old = std::cerr.rdbuf(buf.rdbuf());
  ~CapturedStderr() { std::cerr.rdbuf(old); }
};

TEST(CliBoundary, BadAllocIsExit3OutOfMemoryWhileTheCommand) {
  CapturedStderr err;
  const int code = run_guarded("seqtape train", []() -> int { throw std::bad_alloc(); });
  EXPECT_EQ(code, kDataError);
  EXPECT_NE(err.buf.str().find("out of memory while running seqtape train"), std::string::npos)
      << err.buf.str();
}

TEST(CliBoundary, ExitCodesByKind) {
  CapturedStderr err;
  EXPECT_EQ(run_guarded("x", [] { return kOk; }), kOk);
  EXPECT_EQ(run_guarded("x", []() -> int { throw UsageError("u"); }), kUsage);
  EXPECT_EQ(run_guarded("x", []() -> int { throw Error("e"); }), kDataError);
  EXPECT_EQ(run_guarded("x", []() -> int { throw std::logic_error("bug"); }), kInternal);
}

// The whole command line in-process, with a memory budget: what the CLI fuzz target does.
TEST(CliBoundary, RunCliInProcessRefusesAModelBeyondTheBudget) {
  CapturedStderr err;
  set_memory_limit_for_testing(64 << 20);
  std::vector<std::string> args = {"seqtape",    "gen-copy", "--out",
                                   "unused_dir", "--train",  "100000000"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  const int code = run_cli(static_cast<int>(argv.size()), argv.data());
  set_memory_limit_for_testing(0);
  EXPECT_EQ(code, kDataError);
  EXPECT_NE(err.buf.str().find("test limit"), std::string::npos) << err.buf.str();
}

}  // namespace
}  // namespace seqtape::cli
