#pragma once
// `seqtape export`: a checkpoint's weights as safetensors (named by dotted path, F32, Linear
// weights [in, out]) plus config.json and vocab.txt, readable without seqtape.

#include <string>

#include "infer/quant.h"  // ComputeType

namespace seqtape {

struct ExportReport {
  size_t tensors = 0;
  std::string safetensors_path;
};

// compute int8 or bf16 writes the decoder's matrices quantized as that type decodes them, with
// their scales (infer/quant_io.h); f32 (the default) writes every weight as trained.
ExportReport export_checkpoint(const std::string& checkpoint_path, const std::string& out_dir,
                               ComputeType compute = ComputeType::F32);

}  // namespace seqtape
