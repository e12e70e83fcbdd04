// Writes the binary seeds of fuzz/corpus/ (checkpoints and safetensors); the text seeds are
// committed as they are. Run by hand after a format change:
//   build-fuzz/fuzz/make_seeds fuzz/corpus
// Everything is tiny on purpose: the fuzzer mutates faster on small inputs, and the committed
// corpus stays well under 100 KB.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "infer/export.h"
#include "io/checkpoint.h"
#include "io/envelope.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "train/dataset.h"
#include "train/optim.h"
#include "train/trainer.h"

namespace fs = std::filesystem;
using namespace seqtape;

namespace {

void write(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
  std::printf("%6zu bytes  %s\n", bytes.size(), p.string().c_str());
}

// The smallest real model: the "seed" preset narrowed to one layer each way, with Adam state,
// exactly as the trainer saves it.
Checkpoint tiny_model_checkpoint() {
  const std::vector<TextPair> pairs = {{"今天", "今天", 1}, {"好", "好", 2}};
  const Vocab vocab = build_vocab(pairs);
  ModelConfig cfg = preset("seed", vocab.size());
  cfg.n_encoder_layers = 1;
  cfg.n_decoder_layers = 1;
  cfg.d_ff = 4;
  cfg.max_positions = 8;
  auto model = make_model(cfg);
  NamedParams params = model->named_parameters();
  std::unique_ptr<Optimizer> opt = make_optimizer(params, OptimizerConfig{});
  Checkpoint c;
  c.config_json = cfg.to_json().dump();
  c.vocab = vocab.tokens();
  for (auto& [n, p] : params) c.params.push_back({n, p.value()});
  c.optimizer_name = "adam";
  c.optimizer_state = opt->state();
  c.step = 3;
  c.rng_state = "1 2 3 4";
  c.loader_state_json = R"({"cursor":1,"epoch":0,"order":[1,0],"rng":"5 6 7 8"})";
  c.metrics_json = "{}";
  return c;
}

Checkpoint small_checkpoint() {
  Checkpoint c;
  c.config_json = R"({"d_model":4,"n_heads":1,"vocab_size":6})";
  c.vocab = {"<pad>", "<bos>", "<eos>", "<unk>", "a", "ü"};
  c.params.push_back(
      {"w", Tensor::from(std::vector<float>{1, -2, 3.5f, 0, -0.0f, 1e-30f}, {2, 3})});
  c.params.push_back({"b", Tensor::from(std::vector<double>{0.1, -0.2}, {2})});
  c.params.push_back({"s", Tensor::from(std::vector<float>{2.5f}, {})});
  c.params.push_back({"e", Tensor::zeros({0, 4}, DType::F32)});
  c.optimizer_name = "sgd";
  c.step = 7;
  c.rng_state = std::string("r\0s", 3);
  c.loader_state_json = "{}";
  c.metrics_json = "{}";
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds <corpus dir>\n");
    return 2;
  }
  const fs::path dir = argv[1];
  const Checkpoint model = tiny_model_checkpoint();
  write(dir / "checkpoint" / "tiny_model.ckpt", checkpoint_to_bytes(model));
  // Quantized exports of that checkpoint, as `seqtape export --compute-type` writes them.
  for (ComputeType t : {ComputeType::Int8, ComputeType::Bf16}) {
    const fs::path out = fs::temp_directory_path() / "seqtape_make_seeds_export";
    export_checkpoint((dir / "checkpoint" / "tiny_model.ckpt").string(), out.string(), t);
    write(dir / "safetensors" / ("tiny_model_" + std::string(to_string(t)) + ".safetensors"),
          read_user_file((out / "model.safetensors").string(), "export", 1 << 20));
    fs::remove_all(out);
  }
  write(dir / "checkpoint" / "small.ckpt", checkpoint_to_bytes(small_checkpoint()));
  write(dir / "checkpoint" / "empty.ckpt", checkpoint_to_bytes(Checkpoint{}));

  write(dir / "safetensors" / "tiny_model.safetensors",
        safetensors_to_bytes(model.params, {{"format", "seqtape"}, {"step", "3"}}));
  write(dir / "safetensors" / "small.safetensors", safetensors_to_bytes(small_checkpoint().params));
  write(dir / "safetensors" / "empty.safetensors", safetensors_to_bytes({}));
  write(dir / "safetensors" / "metadata_only.safetensors", safetensors_to_bytes({}, {{"k", "v"}}));
  write(dir / "safetensors" / "f64_nonfinite.safetensors",
        safetensors_to_bytes(
            {{"x", Tensor::from(std::vector<double>{std::numeric_limits<double>::infinity(),
                                                    std::numeric_limits<double>::quiet_NaN()},
                                {1, 2})}}));

  for (const std::string& name : preset_names())
    write(dir / "config" / (name + ".json"), preset(name, 12).to_json().dump(1) + "\n");
  return 0;
}
