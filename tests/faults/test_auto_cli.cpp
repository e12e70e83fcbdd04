// `seqtape train --data D --time-limit T` with no model: the data and the budget choose the
// model and the training settings the user left out (train/auto_defaults.h), and only then.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fault_util.h"
#include "tensor/matmul_backend.h"

namespace seqtape::faults {
namespace {

constexpr const char* kChosen = "chosen for the data and the budget";
constexpr const char* kBf16Products = "matmul: bf16 operands";

struct Trained {
  CliResult result;
  nlohmann::json config, record;
};

Trained train_copy(const TempDir& dir, const std::string& out, std::vector<std::string> extra) {
  std::vector<std::string> args = {
      "train",      "--data", "data/train.tsv", "--valid", "data/valid.tsv", "--out", out,
      "--eval-max", "2",      "--threads",      "1",       "--no-progress"};
  args.insert(args.end(), extra.begin(), extra.end());
  Trained t{run_cli(args, dir.path().string()), {}, {}};
  if (t.result.exit_code != 0) return t;
  t.config = nlohmann::json::parse(read_file(dir.file(out + "/config.json")));
  t.record = nlohmann::json::parse(load_checkpoint(dir.file(out + "/checkpoint.bin")).metrics_json)
                 .at("run");
  return t;
}

TEST(AutoCli, NoModelGivenAndATimeBudgetChoosesModelAndSettings) {
  TempDir dir("auto_cli_chosen");
  write_small_copy_task(dir, 40, 5);
  const Trained t = train_copy(dir, "auto", {"--time-limit", "1s"});
  ASSERT_EQ(t.result.exit_code, 0) << t.result.out << t.result.err;
  EXPECT_NE(t.result.out.find(kChosen), std::string::npos) << t.result.out;
  EXPECT_DOUBLE_EQ(t.config.at("dropout").get<double>(), 0.1);
  EXPECT_EQ(t.config.at("activation"), "gelu");
  EXPECT_DOUBLE_EQ(t.record.at("optimizer").at("label_smoothing").get<double>(), 0.1);
  EXPECT_EQ(t.record.at("optimizer").at("schedule").at("kind"), "wsd");
  EXPECT_GE(t.record.at("optimizer").at("batch_tokens").get<int64_t>(), 512);

  // A setting the user gives is kept; the others are still chosen.
  const Trained pinned = train_copy(
      dir, "pinned", {"--time-limit", "1s", "--label-smoothing", "0", "--schedule", "constant"});
  ASSERT_EQ(pinned.result.exit_code, 0) << pinned.result.err;
  EXPECT_NE(pinned.result.out.find(kChosen), std::string::npos);
  EXPECT_DOUBLE_EQ(pinned.record.at("optimizer").at("label_smoothing").get<double>(), 0.0);
  EXPECT_EQ(pinned.record.at("optimizer").at("schedule").at("kind"), "constant");
  EXPECT_DOUBLE_EQ(pinned.config.at("dropout").get<double>(), 0.1);
}

TEST(AutoCli, AModelFlagPresetOrStepBudgetKeepsTheDefaults) {
  TempDir dir("auto_cli_kept");
  write_small_copy_task(dir, 40, 5);
  const std::vector<std::vector<std::string>> cases = {
      {"--time-limit", "1s", "--d-model", "32"},
      {"--time-limit", "1s", "--preset", "default"},
      {"--time-limit", "1s", "--steps", "3"},
  };
  int i = 0;
  for (const auto& extra : cases) {
    const Trained t = train_copy(dir, "run" + std::to_string(i++), extra);
    ASSERT_EQ(t.result.exit_code, 0) << t.result.err;
    EXPECT_EQ(t.result.out.find(kChosen), std::string::npos) << extra[2] << "\n" << t.result.out;
    EXPECT_DOUBLE_EQ(t.config.at("dropout").get<double>(), 0.0) << extra[2];
    EXPECT_EQ(t.config.at("activation"), "relu") << extra[2];
    EXPECT_DOUBLE_EQ(t.record.at("optimizer").at("label_smoothing").get<double>(), 0.0);
    // nor is the precision chosen: float32 products, as before
    EXPECT_EQ(t.result.out.find("precision chosen"), std::string::npos) << extra[2];
    EXPECT_EQ(t.result.out.find(kBf16Products), std::string::npos) << extra[2];
  }
}

// With neither --precision nor --matmul, a chosen model multiplies in bf16 where the CPU has
// bfloat16 units, and says which precision it chose and why; a pinned precision or matmul keeps
// float32 (a model flag too: AModelFlagPresetOrStepBudgetKeepsTheDefaults).
TEST(AutoCli, TheChosenModelMultipliesInBf16WhereTheCpuHasTheUnits) {
  TempDir dir("auto_cli_precision");
  write_small_copy_task(dir, 40, 5);
  using kernels::Precision;
  const bool units =
      kernels::matmul_problem(kernels::MatmulBackend::OneDNN, Precision::BF16).empty();
  const Trained t = train_copy(dir, "auto", {"--time-limit", "1s"});
  ASSERT_EQ(t.result.exit_code, 0) << t.result.out << t.result.err;
  EXPECT_NE(t.result.out.find(units ? "precision chosen: bf16 products"
                                    : "precision chosen: float32, as bf16 cannot run here"),
            std::string::npos)
      << t.result.out;
  EXPECT_EQ(t.result.out.find(kBf16Products) != std::string::npos, units) << t.result.out;

  for (const char* pinned : {"--precision=f32", "--matmul=openblas"}) {
    const Trained k = train_copy(dir, "pinned", {"--time-limit", "1s", pinned, "--overwrite"});
    ASSERT_EQ(k.result.exit_code, 0) << k.result.err;
    EXPECT_NE(k.result.out.find(kChosen), std::string::npos) << pinned;
    EXPECT_EQ(k.result.out.find("precision chosen"), std::string::npos) << pinned;
    EXPECT_EQ(k.result.out.find(kBf16Products), std::string::npos) << pinned;
  }
}

}  // namespace
}  // namespace seqtape::faults
