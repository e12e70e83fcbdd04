// read_model_files() and load_model(): a checkpoint, a run directory, or an export directory.
//
// Dimension key: none.
#include "infer/load.h"

#include <filesystem>

#include "infer/quant_io.h"
#include "io/checkpoint.h"
#include "io/envelope.h"
#include "io/safetensors.h"
#include "io/weights.h"
#include "text/subword.h"

namespace seqtape {

namespace {

namespace fs = std::filesystem;

// The files `seqtape export` writes: config.json, vocab.txt, model.safetensors, and spm.model
// for a SentencePiece model (its pieces must be vocab.txt's tokens). The safetensors metadata
// names the tokenizer ("tokenizer"; exports written before it carried the key go by whether
// spm.model is there), so that a missing spm.model is an Error rather than subword pieces read
// as characters.
ModelFiles read_export(const fs::path& dir) {
  for (const char* name : {"config.json", "vocab.txt", "model.safetensors"})
    if (!fs::is_regular_file(dir / name))
      fail(dir.string(), std::string("is a directory without checkpoint.bin and without ") + name +
                             " (expected a run directory or one written by seqtape export)");
  ModelFiles f;
  const std::string config = (dir / "config.json").string();
  f.cfg = config_from_json(read_user_file(config, "model configuration", kMaxConfigBytes), config);
  f.vocab = Vocab::load((dir / "vocab.txt").string());
  f.where = (dir / "model.safetensors").string();
  SafetensorsFile weights = read_safetensors(f.where);
  // The weights are used as [in, out]; a file that says otherwise (or says nothing) would have
  // its square matrices read transposed without any shape check noticing.
  const auto layout = weights.metadata.find("linear_layout");
  if (layout == weights.metadata.end() || layout->second != kLinearLayout)
    fail(f.where, "linear_layout is " +
                      (layout == weights.metadata.end() ? std::string("missing")
                                                        : "'" + layout->second + "'") +
                      " in the metadata; seqtape reads only '" + std::string(kLinearLayout) +
                      "' (the layout seqtape export writes)");
  const std::map<std::string, std::string> metadata = weights.metadata;
  QuantizedParams q = read_quantized(std::move(weights), f.where);
  f.params = std::move(q.params);
  f.compute = q.type;
  f.quantized = std::move(q.matrices);
  const std::string spm = (dir / kJointModelFile).string();
  const bool has_spm = fs::is_regular_file(spm);
  const auto named = metadata.find("tokenizer");
  const std::string kind = named != metadata.end() ? named->second
                           : has_spm               ? std::string(kSentencePieceCodec)
                                                   : std::string(kCharsCodec);
  std::string model_bytes, where = f.where;  // the codec's: none for characters
  if (kind == kSentencePieceCodec) {
    if (!has_spm)
      fail(dir.string(), "was exported with a SentencePiece tokenizer (" + f.where + "), but its " +
                             std::string(kJointModelFile) + " is missing");
    model_bytes = read_user_file(spm, "SentencePiece model", kMaxVocabBytes);
    where = spm;
  } else if (has_spm) {
    fail(dir.string(), "holds " + std::string(kJointModelFile) + ", but " + f.where +
                           " says the model reads " +
                           (kind == kCharsCodec ? std::string("characters") : "'" + kind + "'"));
  }
  f.codec = codec_from_parts(kind, f.vocab, std::move(model_bytes), where);
  return f;
}

}  // namespace

ModelFiles read_checkpoint_files(const std::string& path) {
  Checkpoint ckpt = load_checkpoint(path);
  ModelFiles f;
  f.cfg = checkpoint_config(ckpt, path);
  f.vocab = Vocab::from_tokens(ckpt.vocab, path + ": vocab");
  // A malformed embedded SentencePiece model is an Error naming the file.
  f.codec = codec_from_parts(ckpt.tokenizer_kind, f.vocab, std::move(ckpt.tokenizer_model), path);
  f.params = std::move(ckpt.params);
  f.where = path;
  return f;
}

namespace {
// A directory without checkpoint.bin is an export; anything else is (or holds) a checkpoint.
bool is_export_dir(const std::string& path) {
  std::error_code ec;
  return run_checkpoint(path) == path && fs::is_directory(path, ec);
}
}  // namespace

ModelFiles read_model_files(const std::string& path) {
  return is_export_dir(path) ? read_export(path) : read_checkpoint_files(run_checkpoint(path));
}

std::vector<std::string> model_file_paths(const std::string& path) {
  if (!is_export_dir(path)) return {run_checkpoint(path)};
  std::vector<std::string> files;
  for (std::string_view name : {std::string_view("config.json"), std::string_view("vocab.txt"),
                                std::string_view("model.safetensors"), kJointModelFile})
    files.push_back((fs::path(path) / name).string());
  return files;
}

InferenceModel model_from_files(ModelFiles f, WeightLayout layout, ComputeType compute) {
  if (f.compute != ComputeType::F32 && compute != f.compute)
    fail(f.where, std::string("is an export quantized as ") + to_string(f.compute) +
                      ": it decodes as " + to_string(f.compute) + ", not " + to_string(compute) +
                      " (export the checkpoint again for another compute type)");
  return InferenceModel(f.cfg, std::move(f.vocab), f.params, f.where, layout, std::move(f.codec),
                        compute, f.quantized);
}

InferenceModel load_model(const std::string& path, WeightLayout layout,
                          std::optional<ComputeType> compute) {
  ModelFiles f = read_model_files(path);
  const ComputeType c = compute.value_or(f.compute);
  return model_from_files(std::move(f), layout, c);
}

}  // namespace seqtape
