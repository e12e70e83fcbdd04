// load_model(): a checkpoint, a run directory, or an export directory.
//
// Dimension key: none.
#include "infer/load.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "train/safetensors.h"

namespace seqtape {

namespace {

namespace fs = std::filesystem;

ModelConfig read_config(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file.string(), "cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return ModelConfig::from_json(nlohmann::json::parse(text.str()));
  } catch (const nlohmann::json::exception& e) {
    fail(file.string(), std::string("invalid model configuration JSON: ") + e.what());
  } catch (const Error& e) {
    fail(file.string(), std::string("invalid model configuration: ") + e.what());
  }
  return {};  // not reached
}

// The three files `seqtape export` writes.
InferenceModel load_export(const fs::path& dir, WeightLayout layout) {
  for (const char* name : {"config.json", "vocab.txt", "model.safetensors"})
    if (!fs::is_regular_file(dir / name))
      fail(dir.string(), std::string("is a directory without checkpoint.bin and without ") + name +
                             " (expected a run directory or one written by seqtape export)");
  const ModelConfig cfg = read_config(dir / "config.json");
  Vocab vocab = Vocab::load((dir / "vocab.txt").string());
  const std::string weights = (dir / "model.safetensors").string();
  SafetensorsFile f = read_safetensors(weights);
  return InferenceModel(cfg, std::move(vocab), f.tensors, weights, layout);
}

}  // namespace

InferenceModel load_model(const std::string& path, WeightLayout layout) {
  const fs::path p(path);
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return InferenceModel::load(path, layout);
  if (fs::is_regular_file(p / "checkpoint.bin", ec))
    return InferenceModel::load((p / "checkpoint.bin").string(), layout);
  return load_export(p, layout);
}

}  // namespace seqtape
