// The command boundary (cli/run_cli.cpp): how a command ends becomes an exit code and one line
// on stderr. Out of memory is the user's to change (exit 3), never an abort or "internal error".

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <new>
#include <set>
#include <sstream>

#include "cli/commands.h"
#include "infer/load.h"
#include "infer/search.h"
#include "model/memory_budget.h"
#include "tensor/kernels_small_gemm.h"
#include "tensor/matmul_backend.h"
#include "train/run_options.h"

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

// In-process run_cli over `args` (after "seqtape"), its stdout swallowed.
int run_quietly(std::vector<std::string> args) {
  args.insert(args.begin(), "seqtape");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  testing::internal::CaptureStdout();
  const int code = run_cli(static_cast<int>(argv.size()), argv.data());
  testing::internal::GetCapturedStdout();
  return code;
}

// generate --batch-size N decodes N inputs at once, and --num-samples K draws of an input at
// once: the memory check counts all those rows (it counted one input's beams), so what the
// machine cannot hold is refused (exit 3) while the same inputs one at a time still run. The
// budget lies between what one row and four rows need.
TEST(CliBoundary, GenerateChecksTheMemoryOfEveryRowDecodedAtOnce) {
  const std::string model = std::string(SEQTAPE_SOURCE_DIR) + "/datasets/f15/checkpoint.bin";
  const std::string file = testing::TempDir() + "/cli_boundary_four_inputs.txt";
  {
    std::ofstream out(file);
    out << "我爱\n我爱\n我爱\n我爱\n";
  }
  const InferenceModel m = load_model(model);
  GenerateOptions o;
  o.max_new = 8;
  const size_t n = encode_input(m, m.codec(), "我爱").size();
  const uint64_t one = decoding_need(m.config(), n, 1, o, "rows").bytes,
                 four = decoding_need(m.config(), n, 4, o, "rows").bytes;
  ASSERT_LT(one, four);
  const std::vector<std::string> base = {"generate", "--model", model, "--max-new", "8", "--json"};
  auto with = [&](std::vector<std::string> more) {
    std::vector<std::string> a = base;
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  CapturedStderr err;
  set_memory_limit_for_testing((one + four) / 2);
  const int batch4 = run_quietly(with({"--input-file", file, "--batch-size", "4"}));
  const int batch1 = run_quietly(with({"--input-file", file, "--batch-size", "1"}));
  const int draws4 =
      run_quietly(with({"--input", "我爱", "--sample", "--num-samples", "4", "--seed", "1"}));
  const int draws1 = run_quietly(with({"--input", "我爱", "--sample", "--seed", "1"}));
  set_memory_limit_for_testing(0);
  EXPECT_EQ(batch4, kDataError);
  EXPECT_EQ(batch1, kOk);
  EXPECT_EQ(draws4, kDataError);
  EXPECT_EQ(draws1, kOk);
  const std::string e = err.buf.str();
  for (const char* w : {"4 rows (inputs x beam)", "4 sampled draw(s)", "test limit"})
    EXPECT_NE(e.find(w), std::string::npos) << w << " in:\n" << e;
}

// Every flag of `seqtape train` has its row in train/run_options.h's table (whether a resume may
// change it, whether the data-parallel ranks must agree on it), or is a model flag (one of the
// model row's), so that a new flag cannot slip past both comparisons undecided.
// Without --matmul, train takes the faster of the two reproducible routes: oneDNN's float32
// products where the build has oneDNN (the slower OpenBLAS was the default), else OpenBLAS.
TEST(TrainDefaults, MatmulIsOneDnnWhereTheBuildHasIt) {
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("seqtape_default_matmul_" + std::to_string(::getpid())))
                              .string();
  const std::string data = std::string(SEQTAPE_SOURCE_DIR) + "/datasets/reference/copy.tsv";
  // (the seed model's products are all small enough for seqtape's own kernel on every backend)
  const kernels::SmallGemmOff on_the_backend;
  const kernels::MatmulCounts before = kernels::matmul_counts();
  EXPECT_EQ(run_quietly({"train", "--data", data, "--preset", "seed", "--steps", "2", "--eval-max",
                         "1", "--no-progress", "--out", out}),
            kOk);
  const kernels::MatmulCounts after = kernels::matmul_counts();
  std::filesystem::remove_all(out);
  if (kernels::onednn_info().built) {
    EXPECT_GT(after.onednn_f32, before.onednn_f32);
    EXPECT_EQ(after.openblas, before.openblas);
  } else {
    EXPECT_GT(after.openblas, before.openblas);
  }
}

TEST(TrainOptionTable, EveryTrainFlagHasARow) {
  CLI::App app;
  Runner run;
  register_train(app, run);
  std::set<std::string> decided = {"--help"};
  for (const TrainOption& row : train_options())
    for (std::string_view f = row.flags; !f.empty();) {
      const size_t slash = f.find('/');
      decided.emplace(f.substr(0, slash));
      f = slash == std::string_view::npos ? std::string_view() : f.substr(slash + 1);
    }
  for (const ConfigField& f : config_fields())
    if (*f.flag != '\0') decided.emplace(f.flag);
  int flags = 0;
  std::function<void(const CLI::App&)> visit = [&](const CLI::App& a) {
    for (const CLI::Option* o : a.get_options())
      for (const std::string& name : o->get_lnames()) {
        ++flags;
        EXPECT_TRUE(decided.count("--" + name)) << "--" << name << " has no row in train_options()";
      }
    for (const CLI::App* g : a.get_subcommands({})) visit(*g);
  };
  visit(*app.get_subcommand("train"));
  EXPECT_GT(flags, 40);
}

}  // namespace
}  // namespace seqtape::cli
