#pragma once
// Where a model comes from: a checkpoint file, a run directory holding checkpoint.bin, or a
// directory written by `seqtape export` (config.json, vocab.txt, model.safetensors, and spm.model
// when the model reads text through SentencePiece).

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "infer/model.h"

namespace seqtape {

// What a model's files hold, read and checked: the configuration, the vocabulary, the weights
// by name ([in, out], as trained), the text codec over that vocabulary (the SentencePiece model
// the run trained with, or characters) and the file the weights came from. A quantized export
// (infer/quant_io.h) gives its matrices in `quantized`, stored as `compute`, and the rest of
// the parameters in `params`.
struct ModelFiles {
  ModelConfig cfg;
  Vocab vocab;
  std::vector<NamedTensor> params;
  ComputeType compute = ComputeType::F32;
  std::map<std::string, QuantWeight> quantized;
  std::shared_ptr<const TextCodec> codec;
  std::string where;
};

// A checkpoint file. Any damage, a bad configuration or a malformed embedded SentencePiece
// model is an Error naming the file.
ModelFiles read_checkpoint_files(const std::string& path);

// A file: the checkpoint. A directory: its checkpoint.bin if present, else the export's files.
// Errors name the path and what is missing or wrong.
ModelFiles read_model_files(const std::string& path);

// The files read_model_files(path) reads: the checkpoint, a run directory's checkpoint.bin, or
// an export's config.json, vocab.txt, model.safetensors and spm.model (whether present or not).
std::vector<std::string> model_file_paths(const std::string& path);

// read_model_files, as a model for decoding, its weights stored as `compute` says (resolved:
// f32, int8 or bf16). A quantized export decodes as its own type: `compute` must be that type
// (an Error naming the file otherwise), or nullopt (the default) for the files' own type: f32
// for a checkpoint or an f32 export.
InferenceModel load_model(const std::string& path, WeightLayout layout = WeightLayout::Decode,
                          std::optional<ComputeType> compute = std::nullopt);
// The files as a model decoding as `compute` (resolved), under the same rule.
InferenceModel model_from_files(ModelFiles f, WeightLayout layout, ComputeType compute);

}  // namespace seqtape
