// `seqtape export`: a checkpoint's weights as safetensors, with config.json and vocab.txt.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "infer/export.h"
#include "io/checkpoint.h"

namespace seqtape::cli {

void register_export(CLI::App& app, Runner& run) {
  struct Args {
    std::string model, out, compute_type = "f32";
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("export",
                                     "Write a checkpoint's weights as safetensors plus config.json "
                                     "and vocab.txt (readable by numpy/PyTorch)");
  sub->add_option("--model", a->model,
                  "checkpoint.bin (or best.bin) written by seqtape train, or its run directory "
                  "(checkpoint.bin)")
      ->required();
  sub->add_option("--out", a->out, "output directory")->required();
  sub->add_option("--compute-type", a->compute_type,
                  "f32 (the weights as trained); int8 or bf16: the decoder's matrices quantized "
                  "as --compute-type decodes them, with their scales, about 4x / 2x smaller. "
                  "See docs/quantization.md")
      ->capture_default_str();
  sub->callback([&run, a] {
    run = [a] {
      const std::optional<ComputeType> compute = parse_compute_type(a->compute_type);
      if (!compute || *compute == ComputeType::Auto)
        throw UsageError("--compute-type must be f32, int8 or bf16, got '" + a->compute_type + "'");
      const std::string ckpt = run_checkpoint(a->model);
      std::error_code ec;
      if (std::filesystem::is_directory(ckpt, ec))
        fail(ckpt,
             "is a directory without checkpoint.bin (expected a checkpoint or a run directory)");
      const std::vector<FlagPath> inputs = model_inputs("--model", a->model);
      for (const char* name : {"model.safetensors", "config.json", "vocab.txt", "spm.model"})
        check_not_an_input({"--out", (std::filesystem::path(a->out) / name).string()}, inputs);
      ExportReport r = export_checkpoint(ckpt, a->out, *compute);
      const std::string kind =
          *compute == ComputeType::F32 ? "" : std::string(" (") + to_string(*compute) + ")";
      std::printf("wrote %zu tensors%s to %s, with config.json and vocab.txt\n", r.tensors,
                  kind.c_str(), r.safetensors_path.c_str());
      return kOk;
    };
  });
}

}  // namespace seqtape::cli
