// result_json(): the one JSON form of a decoded input (generate --json, serve).
//
// Dimension key: none.
#include "infer/result_json.h"

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

nlohmann::json result_json(const std::string& input, const GenerateResult& r,
                           const GenerateOptions& o, double seconds) {
  const auto steps = static_cast<double>(r.cache_lengths.size());
  const double tps = seconds > 0 ? steps / seconds : 0.0;
  nlohmann::json j = {{"input", input},
                      {"tokens", r.tokens},
                      {"text", r.text},
                      {"score", r.score},
                      {"stop_reason", to_string(r.stop_reason)},
                      {"cache_lengths", r.cache_lengths},
                      {"seconds", seconds},
                      {"tokens_per_second", tps},
                      {"cached", o.use_cache}};
  if (o.n_best > 1) {
    j["n_best"] = nlohmann::json::array();
    for (const Hypothesis& h : r.n_best) j["n_best"].push_back(hypothesis_json(h));
  }
  if (o.verify_cache) j["max_abs_delta"] = r.max_abs_delta;
  return j;
}

}  // namespace seqtape
