#pragma once
// The JSON object of one decoded input, as `seqtape generate --json` prints it and `seqtape
// serve` answers it: one builder so the two cannot drift apart.
//
// Dimension key: none.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "infer/options.h"
#include "text/tokenizer.h"

namespace seqtape {

// {input, tokens, text, score, stop_reason, cache_lengths, unk, seconds, tokens_per_second,
// cached} plus n_best (when o.n_best > 1) or samples (when o.num_samples > 1), and
// max_abs_delta (when o.verify_cache). `unk`: the input's characters that became <unk>;
// `seconds`: the wall time of the decoding (of its batch, when inputs were decoded together).
nlohmann::json result_json(const std::string& input, int64_t unk, const GenerateResult& r,
                           const GenerateOptions& o, double seconds);

// How many of an encoded input's ids are <unk> (0 for a vocabulary without one).
int64_t unk_count(const Vocab& vocab, const std::vector<int32_t>& ids);

}  // namespace seqtape
