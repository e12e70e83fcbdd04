#pragma once
// The JSON object of one decoded input, as `seqtape generate --json` prints it and `seqtape
// serve` answers it: one builder so the two cannot drift apart.
//
// Dimension key: none.

#include <nlohmann/json.hpp>
#include <string>

#include "infer/options.h"

namespace seqtape {

// {input, tokens, text, score, stop_reason, cache_lengths, seconds, tokens_per_second, cached}
// plus n_best (when o.n_best > 1) and max_abs_delta (when o.verify_cache). `seconds` is the
// wall time of the decoding of this input.
nlohmann::json result_json(const std::string& input, const GenerateResult& r,
                           const GenerateOptions& o, double seconds);

}  // namespace seqtape
