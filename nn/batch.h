#pragma once
// Batch: what a model's forward takes — right-padded token ids and the labels of the loss.
// train/dataset.h makes them from text; the model reads the fields of its architecture.
//
// Dimension key: B batch size, S longest encoder input in the batch, T longest decoder input
// (encoder-decoder) or longest sequence (decoder-only) in the batch.

#include <cstdint>
#include <vector>

namespace seqtape {

// Label value the loss skips (padding, and prompt positions of a decoder-only sequence).
inline constexpr int32_t kIgnoreIndex = -100;

// Right-padded with <pad>; labels are kIgnoreIndex wherever there is no target.
// Encoder-decoder batches fill src/src_len/tgt_in/tgt_len/labels (tokens and len stay empty).
// Decoder-only batches fill tokens/len/labels (S = 0, src/tgt_* stay empty).
struct Batch {
  int64_t B = 0;
  int64_t S = 0;
  int64_t T = 0;
  std::vector<int32_t> src;      // [B*S] enc, row-major
  std::vector<int32_t> src_len;  // [B]   valid positions of each src row
  std::vector<int32_t> tgt_in;   // [B*T] dec_in
  std::vector<int32_t> tgt_len;  // [B]
  std::vector<int32_t> tokens;   // [B*T] decoder-only input
  std::vector<int32_t> len;      // [B]
  std::vector<int32_t> labels;   // [B*T]
  int64_t n_label_tokens = 0;    // labels != kIgnoreIndex
  std::vector<uint32_t> index;   // [B] which examples (positions in the loader's list)
};

}  // namespace seqtape
