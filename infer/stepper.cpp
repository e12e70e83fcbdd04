// The session a search drives, and the cache verifier beside it.
//
// Dimension key: R rows, V vocabulary.
#include "infer/stepper.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace seqtape {

Stepper::Stepper(const InferenceModel& m, const GenerateOptions& o, size_t n_inputs)
    : main_(m, o.use_cache ? CacheMode::Cached : CacheMode::Uncached), V_(m.config().vocab_size) {
  if (o.verify_cache) check_.emplace(m, o.use_cache ? CacheMode::Uncached : CacheMode::Cached);
  if (o.on_attention) main_.set_attention_observer(o.on_attention);
  delta_.assign(n_inputs, o.verify_cache ? 0.0 : -1.0);
}

void Stepper::begin(const std::vector<std::vector<int32_t>>& sources,
                    const std::vector<int32_t>& row_source, int64_t capacity) {
  main_.begin(sources, row_source, capacity);
  if (check_) check_->begin(sources, row_source, capacity);
  row_delta_.assign(row_source.size(), -1.0);
}

const float* Stepper::prefill(std::span<const int32_t> rows,
                              const std::vector<std::vector<int32_t>>& tokens) {
  const float* a = main_.prefill(rows, tokens);
  if (check_) compare(rows, a, check_->prefill(rows, tokens));
  return a;
}

const float* Stepper::step(std::span<const int32_t> rows, std::span<const int32_t> tokens) {
  const float* a = main_.step(rows, tokens);
  if (check_) compare(rows, a, check_->step(rows, tokens));
  return a;
}

void Stepper::reorder(std::span<const int32_t> parent) {
  main_.reorder(parent);
  if (check_) check_->reorder(parent);
}

void Stepper::reorder(std::span<const int32_t> rows, std::span<const int32_t> parents) {
  main_.reorder(rows, parents);
  if (check_) check_->reorder(rows, parents);
}

void Stepper::open(int64_t max_rows, int64_t capacity) {
  if (check_) fail("Stepper::open", "verify_cache decodes in generate() only");
  main_.open(max_rows, capacity);
  row_delta_.assign(size_t(max_rows), -1.0);
}

std::vector<int32_t> Stepper::admit(const std::vector<int32_t>& source, int64_t n_rows) {
  return main_.admit(source, n_rows);
}

std::vector<std::vector<int32_t>> Stepper::admit(const std::vector<std::vector<int32_t>>& sources,
                                                 std::span<const int64_t> n_rows) {
  return main_.admit(sources, n_rows);
}

void Stepper::release(std::span<const int32_t> rows) {
  main_.release(rows);
}

void Stepper::compare(std::span<const int32_t> rows, const float* a, const float* b) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < rows.size(); ++i) {
    double& d = delta_[size_t(main_.source_of(rows[i]))];
    double& rd = row_delta_[size_t(rows[i])];
    rd = 0;
    for (int64_t v = 0; v < V_; ++v) {
      const int64_t k = int64_t(i) * V_ + v;
      const double e = std::fabs(static_cast<double>(a[k]) - static_cast<double>(b[k]));
      d = std::isnan(e) ? kInf : std::max(d, e);
      rd = std::isnan(e) ? kInf : std::max(rd, e);
    }
  }
}

}  // namespace seqtape
