#pragma once
// Data checked before step 1: every encoded example against the model's max_positions (an
// error naming file:line, or skipped or truncated by policy), and a summary of what the run
// trains on (examples, tokens, length percentiles and the <unk> rate per side).
//
// Lengths, as the model sees them:
//   seq2seq       encoder input src + <eos> and decoder input <bos> + tgt, each <= max_positions
//   decoder-only  src <sep> tgt (the sequence without its last token) <= max_positions

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "train/dataset.h"

namespace seqtape {

enum class TooLong { kError, kSkip, kTruncate };
TooLong parse_too_long(std::string_view name);  // "error" | "skip" | "truncate"
const char* too_long_name(TooLong t);

struct LengthCheck {
  int64_t too_long = 0;            // examples longer than max_positions
  int64_t skipped = 0;             // removed (kSkip; kTruncate when nothing would be left to learn)
  int64_t truncated = 0;           // cut to fit (kTruncate)
  std::vector<std::string> first;  // "file:line (source N tokens, target M)", the first few
};

// Checks every example of `data` (encoded from `pairs`, same order; `name` is the file) and
// applies `policy`, removing the matching pairs too so that both stay in step. kError throws an
// Error naming the first few file:lines and the count. Truncation keeps the first tokens:
// seq2seq cuts the source to max_positions - 1 tokens before <eos> and the target to
// max_positions - 1 tokens (the labels keep their final <eos>); decoder-only cuts the sequence
// to max_positions positions, and an example whose target would be cut entirely is skipped.
LengthCheck check_lengths(EncodedPairs& data, std::vector<TextPair>& pairs, int64_t max_positions,
                          TooLong policy, std::string_view name);

struct SideStats {
  int64_t examples = 0, tokens = 0, unk = 0;
  int64_t p50 = 0, p90 = 0, p99 = 0, max = 0;  // tokens per example, without <bos>/<eos>/<sep>
  double unk_rate() const {
    return tokens ? static_cast<double>(unk) / static_cast<double>(tokens) : 0.0;
  }
};
struct DataSummary {
  SideStats source, target;
};
// `unk_id` absent: no <unk> in the vocabulary (the rate is 0).
DataSummary summarize(const EncodedPairs& data, std::optional<int32_t> unk_id);
// Nearest-rank percentile of sorted values (q in (0, 100]); 0 for none.
int64_t percentile(const std::vector<int64_t>& sorted, double q);

inline constexpr double kHighUnkRate = 0.01;
// Two lines ("<label> source: ..."/"target: ...") and a warning line per side whose <unk> rate
// is above kHighUnkRate.
std::string format_summary(const DataSummary& s, std::string_view label);

}  // namespace seqtape
