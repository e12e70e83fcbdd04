#pragma once
// Where a model comes from: a checkpoint file, a run directory holding checkpoint.bin, or a
// directory written by `seqtape export` (config.json, vocab.txt, model.safetensors).

#include <string>

#include "infer/model.h"

namespace seqtape {

// A file: the checkpoint. A directory: its checkpoint.bin if present, else the export's three
// files. Errors name the path and what is missing or wrong.
InferenceModel load_model(const std::string& path, WeightLayout layout = WeightLayout::Decode);

}  // namespace seqtape
