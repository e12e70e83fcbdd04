#include "train/export.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nn/config.h"
#include "nn/memory_budget.h"
#include "train/checkpoint.h"
#include "train/safetensors.h"
#include "train/tokenizer.h"
#include "train/trainer.h"

namespace seqtape {

ExportReport export_checkpoint(const std::string& checkpoint_path, const std::string& out_dir) {
  Checkpoint c = load_checkpoint(checkpoint_path);
  ModelConfig cfg;
  try {
    cfg = ModelConfig::from_json(nlohmann::json::parse(c.config_json));
  } catch (const nlohmann::json::exception& e) {
    fail(checkpoint_path, std::string("invalid configuration: ") + e.what());
  }
  // The files written must describe one model, as generate requires of the checkpoint: the
  // vocabulary's size is vocab_size, and the weights are the configuration's, name by name.
  if (static_cast<int64_t>(c.vocab.size()) != cfg.vocab_size)
    fail(checkpoint_path, "the vocabulary has " + std::to_string(c.vocab.size()) +
                              " tokens, the configuration's vocab_size is " +
                              std::to_string(cfg.vocab_size));
  Vocab::from_tokens(c.vocab, checkpoint_path + ": vocab");  // <pad>, <bos>, <eos>, no repeats
  check_memory_budget(decoding_memory(cfg, 1, 0, 1), "export");
  const NamedParams expected = make_model(cfg)->named_parameters();
  if (expected.size() != c.params.size())
    fail(checkpoint_path, "holds " + std::to_string(c.params.size()) +
                              " parameters, the configuration implies " +
                              std::to_string(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    const Tensor& want = expected[i].second.value();
    const NamedTensor& got = c.params[i];
    if (got.name != expected[i].first || got.value.shape() != want.shape())
      fail(checkpoint_path, "parameter '" + got.name + "' " + shape_str(got.value.shape()) +
                                " does not match the configuration's '" + expected[i].first + "' " +
                                shape_str(want.shape()));
  }
  check_finite(c.params, checkpoint_path);  // never export NaN/Inf weights
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
  std::ofstream(dir / "config.json") << cfg.to_json().dump(2) << "\n";
  std::ofstream v(dir / "vocab.txt");
  for (const auto& t : c.vocab) v << t << "\n";
  if (!v) fail((dir / "vocab.txt").string(), "could not be written");
  return r;
}

}  // namespace seqtape
