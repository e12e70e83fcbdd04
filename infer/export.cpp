#include "infer/export.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "infer/quant_io.h"
#include "io/envelope.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "model/memory_budget.h"
#include "text/subword.h"
#include "text/text_codec.h"
#include "text/tokenizer.h"

namespace seqtape {

ExportReport export_checkpoint(const std::string& checkpoint_path, const std::string& out_dir,
                               ComputeType compute) {
  if (compute == ComputeType::Auto)
    fail("export", "compute type auto names no stored type (give f32, int8 or bf16)");
  Checkpoint c = load_checkpoint(checkpoint_path);
  const ModelConfig cfg = checkpoint_config(c, checkpoint_path);
  // The files written must describe one model, as generate requires of the checkpoint: the
  // vocabulary's size is vocab_size, and the weights are the configuration's, name by name.
  if (static_cast<int64_t>(c.vocab.size()) != cfg.vocab_size)
    fail(checkpoint_path, "the vocabulary has " + std::to_string(c.vocab.size()) +
                              " tokens, the configuration's vocab_size is " +
                              std::to_string(cfg.vocab_size));
  Vocab::from_tokens(c.vocab, checkpoint_path + ": vocab");  // <pad>, <bos>, <eos>, no repeats
  check_memory_budget(decoding_memory(cfg, 1, 0, 1), "export");
  check_parameters(cfg, c.params, checkpoint_path);  // the named weights, never NaN/Inf ones
  // The tokenizer, checked before anything is written (a malformed SentencePiece model).
  codec_from_parts(c.tokenizer_kind, Vocab::from_tokens(c.vocab, checkpoint_path + ": vocab"),
                   c.tokenizer_model, checkpoint_path);
  namespace fs = std::filesystem;
  fs::create_directories(out_dir);
  const fs::path dir(out_dir);
  ExportReport r;
  r.tensors = c.params.size();  // a quantized export adds its scales below
  r.safetensors_path = (dir / "model.safetensors").string();
  std::map<std::string, std::string> metadata{{"format", "seqtape"},
                                              {"linear_layout", std::string(kLinearLayout)},
                                              {"step", std::to_string(c.step)},
                                              {"tokenizer", c.tokenizer_kind}};
  if (compute == ComputeType::F32) {
    write_safetensors(r.safetensors_path, c.params, metadata);
  } else {
    metadata[kComputeTypeKey] = to_string(compute);
    const QuantizedTensors q = quantize_for_export(c.params, compute);
    write_safetensors(r.safetensors_path, q.tensors, metadata, q.stored);
    r.tensors = q.tensors.size() + q.stored.size();
  }
  // Each write checked (write_file_atomic): a failure is an Error naming the file.
  write_file_atomic((dir / "config.json").string(), {cfg.to_json().dump(2) + "\n"});
  std::string vocab;
  for (const auto& t : c.vocab) vocab += t + "\n";
  write_file_atomic((dir / "vocab.txt").string(), {vocab});
  if (c.tokenizer_kind == kSentencePieceCodec)  // the model that turns text into these ids
    write_file_atomic((dir / kJointModelFile).string(), {std::string_view(c.tokenizer_model)});
  return r;
}

}  // namespace seqtape
