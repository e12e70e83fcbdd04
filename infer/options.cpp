// GenerateOptions: the one check of the decoding options, used by generate() and the CLI.
//
// Dimension key: none (scalar options).
#include "infer/options.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tensor/tensor.h"  // fail

namespace seqtape {

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::Eos:
      return "eos";
    case StopReason::Length:
      return "length";
    case StopReason::StopString:
      return "stop_string";
    case StopReason::Cancelled:
      return "cancelled";
  }
  return "unknown";
}

std::optional<std::string> GenerateOptions::problem(const Namer& name) const {
  using std::to_string;
  if (beam < 1) return name("beam") + " must be at least 1, got " + to_string(beam);
  if (n_best < 1 || n_best > beam)
    return name("n_best") + " must be in [1, " + name("beam") + " " + to_string(beam) + "], got " +
           to_string(n_best);
  if (!std::isfinite(length_penalty)) return name("length_penalty") + " must be finite";
  if (!(temperature >= 0) || !std::isfinite(temperature))
    return name("temperature") + " must be >= 0 (0 = greedy), got " + to_string(temperature);
  if (top_k < 0) return name("top_k") + " must be >= 0 (0 = off)";
  if (!(top_p > 0 && top_p <= 1))
    return name("top_p") + " must be in (0, 1], got " + to_string(top_p);
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
    return name("repetition_penalty") + " must be > 0 (1 = off), got " +
           to_string(repetition_penalty);
  if (no_repeat_ngram < 0) return name("no_repeat_ngram") + " must be >= 0 (0 = off)";
  if (max_new < 1) return name("max_new") + " must be at least 1";
  if (min_new < 0 || min_new > max_new)
    return name("min_new") + " must be in [0, " + name("max_new") + " " + to_string(max_new) + "]";
  if (sample && beam > 1)
    return name("sample") + " and " + name("beam") + " > 1 cannot be combined";
  if (num_samples < 1)
    return name("num_samples") + " must be at least 1, got " + to_string(num_samples);
  if (num_samples > 1 && !sample) return name("num_samples") + " > 1 needs " + name("sample");
  if (num_samples > 1 && on_stream)
    return name("num_samples") + " > 1 cannot be streamed (the draws would interleave)";
  for (const std::string& s : stop_strings)
    if (s.empty()) return name("stop_strings") + " needs a non-empty string";
  return std::nullopt;
}

int64_t new_tokens(const ModelConfig& c, size_t input_tokens, const GenerateOptions& o) {
  const int64_t P = c.max_positions;
  const int64_t room = c.arch == Arch::Seq2Seq ? P - 1 : P - static_cast<int64_t>(input_tokens);
  return std::clamp<int64_t>(std::min(o.max_new, room), 0, P);
}

MemoryNeed decoding_need(const ModelConfig& c, size_t input_tokens, size_t inputs,
                         const GenerateOptions& o, const char* rows_are) {
  // Saturating: --num-samples may be 2^63 - 1.
  const int64_t per = std::max<int64_t>(1, o.num_samples > 1 ? o.num_samples : o.beam);
  const auto n = static_cast<int64_t>(std::max<size_t>(1, inputs));
  const int64_t rows =
      per > std::numeric_limits<int64_t>::max() / n ? std::numeric_limits<int64_t>::max() : per * n;
  const bool s2s = c.arch == Arch::Seq2Seq;
  const auto in = static_cast<int64_t>(input_tokens);
  const int64_t length = (s2s ? 1 : in) + new_tokens(c, input_tokens, o);
  return decoding_memory(c, rows, s2s ? in : 0, length, rows_are);
}

void GenerateOptions::validate() const {
  if (auto p = problem([](std::string_view option) { return std::string(option); }))
    fail("generate", "option " + *p);
}

}  // namespace seqtape
