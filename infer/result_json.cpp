// result_json(): the one JSON form of a decoded input (generate --json, serve).
//
// Dimension key: none.
#include "infer/result_json.h"

#include <algorithm>
#include <optional>

namespace seqtape {

namespace {

nlohmann::json hypothesis_json(const Hypothesis& h) {
  return {{"tokens", h.tokens},
          {"text", h.text},
          {"score", h.score},
          {"normalized_score", h.normalized_score},
          {"stop_reason", to_string(h.stop_reason)}};
}

}  // namespace

nlohmann::json result_json(const std::string& input, int64_t unk, const GenerateResult& r,
                           const GenerateOptions& o, double seconds) {
  const auto steps = static_cast<double>(r.cache_lengths.size());
  nlohmann::json j = {{"input", input},
                      {"tokens", r.tokens},
                      {"text", r.text},
                      {"score", r.score},
                      {"stop_reason", to_string(r.stop_reason)},
                      {"cache_lengths", r.cache_lengths},
                      {"unk", unk},
                      {"seconds", seconds},
                      {"tokens_per_second", seconds > 0 ? steps / seconds : 0.0},
                      {"cached", o.use_cache}};
  if (o.n_best > 1 || o.num_samples > 1) {
    nlohmann::json& list = j[o.num_samples > 1 ? "samples" : "n_best"];
    list = nlohmann::json::array();
    for (const Hypothesis& h : r.n_best) list.push_back(hypothesis_json(h));
  }
  if (o.verify_cache) j["max_abs_delta"] = r.max_abs_delta;
  return j;
}

int64_t unk_count(const Vocab& vocab, const std::vector<int32_t>& ids) {
  const std::optional<int32_t> unk = vocab.unk_id();
  return unk ? static_cast<int64_t>(std::count(ids.begin(), ids.end(), *unk)) : 0;
}

}  // namespace seqtape
