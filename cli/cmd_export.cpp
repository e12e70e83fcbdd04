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
    std::string model, out;
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
  sub->callback([&run, a] {
    run = [a] {
      const std::string ckpt = run_checkpoint(a->model);
      std::error_code ec;
      if (std::filesystem::is_directory(ckpt, ec))
        fail(ckpt,
             "is a directory without checkpoint.bin (expected a checkpoint or a run directory)");
      const std::vector<FlagPath> inputs = model_inputs("--model", a->model);
      for (const char* name : {"model.safetensors", "config.json", "vocab.txt", "spm.model"})
        check_not_an_input({"--out", (std::filesystem::path(a->out) / name).string()}, inputs);
      ExportReport r = export_checkpoint(ckpt, a->out);
      std::printf("wrote %zu tensors to %s, with config.json and vocab.txt\n", r.tensors,
                  r.safetensors_path.c_str());
      return kOk;
    };
  });
}

}  // namespace seqtape::cli
