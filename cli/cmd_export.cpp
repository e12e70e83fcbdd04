// `seqtape export`: a checkpoint's weights as safetensors, with config.json and vocab.txt.
#include <cstdio>

#include "cli/commands.h"
#include "train/export.h"

namespace seqtape::cli {

void register_export(CLI::App& app, Runner& run) {
  struct Args {
    std::string model, out;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("export",
                                     "Write a checkpoint's weights as safetensors plus config.json "
                                     "and vocab.txt (readable by numpy/PyTorch)");
  sub->add_option("--model", a->model, "checkpoint.bin written by seqtape train")->required();
  sub->add_option("--out", a->out, "output directory")->required();
  sub->callback([&run, a] {
    run = [a] {
      ExportReport r = export_checkpoint(a->model, a->out);
      std::printf("wrote %zu tensors to %s, with config.json and vocab.txt\n", r.tensors,
                  r.safetensors_path.c_str());
      return kOk;
    };
  });
}

}  // namespace seqtape::cli
