#pragma once
// Stepper: the decoding session a search drives, plus (verify_cache) a second session in the
// other cache mode fed the same tokens, whose logits are compared with the first's at every
// call: the cache verifier.
//
// Dimension key: R rows, V vocabulary.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "infer/options.h"
#include "infer/session.h"

namespace seqtape {

class Stepper {
 public:
  Stepper(const InferenceModel& m, const GenerateOptions& o, size_t n_inputs);
  void begin(const std::vector<std::vector<int32_t>>& sources,
             const std::vector<int32_t>& row_source, int64_t capacity);
  // As DecodeSession's: logits [rows.size(), V].
  const float* prefill(std::span<const int32_t> rows,
                       const std::vector<std::vector<int32_t>>& tokens);
  const float* step(std::span<const int32_t> rows, std::span<const int32_t> tokens);
  void reorder(std::span<const int32_t> parent);
  void reorder(std::span<const int32_t> rows, std::span<const int32_t> parents);
  // Continuous batching (DecodeSession::open/admit/release); not with verify_cache.
  void open(int64_t max_rows, int64_t capacity);
  std::vector<int32_t> admit(const std::vector<int32_t>& source, int64_t n_rows);
  std::vector<std::vector<int32_t>> admit(const std::vector<std::vector<int32_t>>& sources,
                                          std::span<const int64_t> n_rows);
  void release(std::span<const int32_t> rows);
  int64_t free_rows() const { return main_.free_rows(); }
  int64_t length(int32_t row) const { return main_.length(row); }
  // verify_cache: the input's max |Δ| over every call so far; else -1.
  double delta(size_t input) const { return input < delta_.size() ? delta_[input] : -1.0; }
  // verify_cache: the row's max |Δ| in the last call that fed it; else -1.
  double row_delta(int32_t row) const { return row_delta_[size_t(row)]; }

 private:
  void compare(std::span<const int32_t> rows, const float* a, const float* b);

  DecodeSession main_;
  std::optional<DecodeSession> check_;
  int64_t V_;
  std::vector<double> delta_;      // per input
  std::vector<double> row_delta_;  // per row
};

}  // namespace seqtape
