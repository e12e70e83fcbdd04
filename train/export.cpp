#include "train/export.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "train/envelope.h"
#include "train/safetensors.h"
#include "train/weights.h"

namespace seqtape {

ExportReport export_checkpoint(const std::string& checkpoint_path, const std::string& out_dir) {
  Checkpoint c = load_checkpoint(checkpoint_path);
  const ModelConfig cfg = checkpoint_config(c, checkpoint_path);
  check_parameters(cfg, c.params, checkpoint_path);  // the named weights, never NaN/Inf ones
  namespace fs = std::filesystem;
  fs::create_directories(out_dir);
  const fs::path dir(out_dir);
  ExportReport r;
  r.tensors = c.params.size();
  r.safetensors_path = (dir / "model.safetensors").string();
  write_safetensors(r.safetensors_path, c.params,
                    {{"format", "seqtape"},
                     {"linear_layout", "[in, out]: y = x @ W + b"},
                     {"step", std::to_string(c.step)}});
  // Each write checked (write_file_atomic): a failure is an Error naming the file.
  write_file_atomic((dir / "config.json").string(), {cfg.to_json().dump(2) + "\n"});
  std::string vocab;
  for (const auto& t : c.vocab) vocab += t + "\n";
  write_file_atomic((dir / "vocab.txt").string(), {vocab});
  return r;
}

}  // namespace seqtape
