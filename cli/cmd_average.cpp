// `seqtape average CKPT... --out F`: the element-wise mean of several checkpoints' parameters,
// as fairseq's average_checkpoints.py and Marian's averaging do. Every checkpoint must have the
// same configuration and vocabulary (else an Error naming the file, exit 3). The result is a
// checkpoint for generate, eval and export; it carries no optimizer state, so it does not resume.
// An existing --out is replaced only with --overwrite.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "io/checkpoint.h"
#include "io/envelope.h"

namespace seqtape::cli {

namespace {

struct AverageArgs {
  std::vector<std::string> inputs;
  std::string out;
  bool overwrite = false;
};

int run_average(const AverageArgs& a) {
  if (a.inputs.size() < 2) throw UsageError("give at least two checkpoints to average");
  // An existing --out may be one of the inputs or a run's checkpoint.bin (whose optimizer
  // state the average does not keep): replaced only when asked, never silently, and never one
  // of the inputs, even when asked.
  std::error_code ec;
  if (!a.overwrite && std::filesystem::exists(a.out, ec))
    fail(a.out, "already exists; give --overwrite to replace it, or another --out");
  std::vector<FlagPath> inputs;
  for (const std::string& in : a.inputs) inputs.push_back({"checkpoint", in});
  check_not_an_input({"--out", a.out}, inputs);
  check_can_save(a.out);  // a directory or an unwritable place, before the loading
  save_checkpoint(a.out, average_checkpoints(a.inputs));
  std::printf("averaged %zu checkpoints into %s\n", a.inputs.size(), a.out.c_str());
  return kOk;
}

}  // namespace

void register_average(CLI::App& app, Runner& run) {
  auto a = std::make_shared<AverageArgs>();
  CLI::App* sub = app.add_subcommand(
      "average", "Average the parameters of checkpoints of one run (for generate, eval, export)");
  sub->add_option("checkpoints", a->inputs, "checkpoints to average (e.g. checkpoint-*.bin)")
      ->required();
  sub->add_option("--out", a->out, "the averaged checkpoint")->required();
  sub->add_flag("--overwrite", a->overwrite, "replace --out if it exists");
  sub->callback([&run, a] { run = [a] { return run_average(*a); }; });
}

}  // namespace seqtape::cli
