// `seqtape average CKPT... --out F`: the element-wise mean of several checkpoints' parameters,
// as fairseq's average_checkpoints.py and Marian's averaging do. Every checkpoint must have the
// same configuration and vocabulary (else an Error naming the file, exit 3). The result is a
// checkpoint for generate, eval and export; it carries no optimizer state, so it does not resume.
// An existing --out is replaced only with --overwrite.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "train/checkpoint.h"
#include "train/envelope.h"

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
  Checkpoint first = load_checkpoint(a.inputs[0]);
  std::vector<std::vector<double>> sums;
  for (const NamedTensor& t : first.params) sums.push_back(t.value.to_vector());
  int64_t last_step = first.step;
  for (size_t k = 1; k < a.inputs.size(); ++k) {
    const std::string& path = a.inputs[k];
    const Checkpoint c = load_checkpoint(path);
    if (c.config_json != first.config_json)
      fail(path, "has another model configuration than " + a.inputs[0] +
                     "; only checkpoints of one run (or one configuration) can be averaged");
    if (c.vocab != first.vocab) fail(path, "has another vocabulary than " + a.inputs[0]);
    if (c.params.size() != first.params.size())
      fail(path, "has " + std::to_string(c.params.size()) + " parameters, " + a.inputs[0] +
                     " has " + std::to_string(first.params.size()));
    for (size_t i = 0; i < c.params.size(); ++i) {
      const NamedTensor& t = c.params[i];
      const NamedTensor& f = first.params[i];
      if (t.name != f.name || t.value.shape() != f.value.shape())
        fail(path, "parameter " + std::to_string(i) + " is " + t.name + " " +
                       shape_str(t.value.shape()) + ", in " + a.inputs[0] + " " + f.name + " " +
                       shape_str(f.value.shape()));
      const std::vector<double> v = t.value.to_vector();
      for (size_t j = 0; j < v.size(); ++j) sums[i][j] += v[j];
    }
    last_step = std::max(last_step, c.step);
  }
  const double n = static_cast<double>(a.inputs.size());
  for (size_t i = 0; i < first.params.size(); ++i) {
    Tensor avg = Tensor::zeros(first.params[i].value.shape(), first.params[i].value.dtype());
    for (size_t j = 0; j < sums[i].size(); ++j) avg.set(static_cast<int64_t>(j), sums[i][j] / n);
    first.params[i].value = avg;
  }
  first.optimizer_state.clear();
  first.step = last_step;
  first.loader_state_json = "{}";
  first.metrics_json = nlohmann::json{{"averaged_from", a.inputs}}.dump();
  save_checkpoint(a.out, first);
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
