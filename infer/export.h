#pragma once
// `seqtape export`: a checkpoint's weights as safetensors (named by dotted path, F32, Linear
// weights [in, out]) plus config.json and vocab.txt, readable without seqtape.

#include <string>

namespace seqtape {

struct ExportReport {
  size_t tensors = 0;
  std::string safetensors_path;
};

ExportReport export_checkpoint(const std::string& checkpoint_path, const std::string& out_dir);

}  // namespace seqtape
